"""Every Python block of docs/workflows.md runs as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"


def test_every_block_runs() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) >= 5
    namespace: dict[str, Any] = {"__name__": "workflows_doc"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/workflows.md block {i + 1}", "exec"), namespace)
    assert namespace["sent"] == ["import finished"]
