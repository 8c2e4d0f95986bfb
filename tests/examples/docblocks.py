"""The Python code blocks of docs/*.md: finding one by its first line, running it as written.

A block runs in a namespace holding what the page gave the reader before it (``app``, a task
it declared, ``url``): each test builds that namespace and says so. The only edits allowed are
``replace`` pairs a test names — a server address swapped for the test server's, a path for a
temporary one, a call that serves until stopped for one pass — and each must occur in the block.
A block a test cannot run is marked in the page itself, on the line above it:
``<!-- fragment: why -->`` (test_docs_blocks.py checks every block is one or the other).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"
_BLOCK = re.compile(r"(?:<!-- fragment: (.+?) -->\n)?^( *)```python\n(.*?)^\2```", re.M | re.S)


@dataclass(frozen=True)
class Block:
    """One Python block: its page, line, code and fragment reason (None: it is run)."""

    doc: str
    line: int
    code: str
    fragment: str | None

    @property
    def first(self) -> str:
        return self.code.splitlines()[0].strip()


def blocks(doc: str | None = None) -> list[Block]:
    """Every Python block of ``docs/<doc>`` (of every page when None), in order."""
    found = []
    for path in sorted(DOCS.glob("*.md")) if doc is None else [DOCS / doc]:
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):  # a block may be indented (inside a list item)
            line = text.count("\n", 0, match.start(3))
            code = textwrap.dedent(match.group(3))
            found.append(Block(path.name, line, code, match.group(1)))
    return found


def block(doc: str, first: str) -> Block:
    """The one block of ``docs/<doc>`` whose first line starts with ``first``."""
    matching = [b for b in blocks(doc) if b.first.startswith(first)]
    assert len(matching) == 1, f"{doc}: {len(matching)} blocks start with {first!r}"
    return matching[0]


def run(doc: str, first: str, ns: dict[str, Any], replace: dict[str, str] | None = None) -> Any:
    """Execute the block in ``ns`` (after the named replacements); the value of its last line
    when that is an expression (what a reader sees printed in a REPL), else None."""
    found = block(doc, first)
    code = found.code
    for old, new in (replace or {}).items():
        assert old in code, f"{doc}:{found.line}: {old!r} is not in the block"
        code = code.replace(old, new)
    tree = ast.parse(code)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body[-1] = ast.Assign([ast.Name("_last_value", ast.Store())], last.value)
        ast.fix_missing_locations(tree)
    ns.setdefault("__name__", f"docs_{Path(doc).stem.replace('-', '_')}")
    exec(compile(tree, f"docs/{doc}:{found.line}", "exec"), ns)
    return ns.pop("_last_value", None)
