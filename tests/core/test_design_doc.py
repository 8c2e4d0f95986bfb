"""docs/design.md is the design reference: nothing cites a file the repository lacks, and its
transition table says exactly what ``core/state.py::TRANSITIONS`` says."""

from __future__ import annotations

import re
from pathlib import Path

from conveyor.core.state import TRANSITIONS

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
OLD_NAME = "DESIGN" + ".md"  # spelt in two parts so this file does not cite it
_TEXT = (".py", ".md", ".txt", ".toml", ".sh")


def test_nothing_cites_the_missing_design_file() -> None:
    cited = []
    for where in ("src", "docs", "tests", "examples", "bench", "README.md"):
        base = ROOT / where
        files = [base] if base.is_file() else base.rglob("*")
        for path in files:
            text = path.suffix in _TEXT and path.is_file() and path.read_text(errors="replace")
            if text and OLD_NAME in text:
                cited.append(str(path.relative_to(ROOT)))
    assert cited == [], f"cite docs/design.md instead: {cited}"


def test_the_design_transition_table_matches_the_code() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("## 2. States and the transition table", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (\w+) \| (.+?) \| .+ \|$", section, re.M)
    documented = set()
    for sources, event, target in rows:
        if event in ("event", "enqueue"):  # the header and the way in
            continue
        for source in re.findall(r"`(\w+)`", sources):
            documented.add((source, event, target.strip("`")))
    expected = {(str(s), str(e), str(t)) for (s, e), t in TRANSITIONS.items()}
    assert documented == expected


def diagram_edges(text: str) -> set[tuple[str, str, str]]:
    """(source, event, target) of the mermaid state diagram of docs/architecture.md; a label
    names its events first, alternatives split by " / " (parenthesised notes left out)."""
    diagram = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    edges = set()
    for source, target, label in re.findall(r"^\s*(\S+) --> (\S+?): (.+)$", diagram, re.M):
        if "[*]" in (source, target):
            continue
        for alternative in re.sub(r"\([^)]*\)", "", label).split("/"):
            edges.add((source, alternative.split()[0], target))
    return edges


def test_the_architecture_state_diagram_matches_the_code() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    expected = {(str(s), str(e), str(t)) for (s, e), t in TRANSITIONS.items()}
    assert diagram_edges(text) == expected
    plain = text.split("The same diagram in plain text:", 1)[1].split("```\n", 2)[1]
    assert {e for _, e, _ in expected} <= set(re.findall(r"\w+", plain))


def test_a_wrong_diagram_edge_is_caught() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    planted = text.replace("active --> completed: complete", "active --> completed: finish")
    assert ("active", "finish", "completed") in diagram_edges(planted)
    assert ("active", "complete", "completed") not in diagram_edges(planted)


def test_the_defaults_design_md_states_are_the_code_s() -> None:
    """Each default the design reference states is built from the code's own value, so a
    changed default fails here until the doc says the new one."""
    import inspect

    from conveyor import AutoBatch, Backoff
    from conveyor.config import Settings
    from conveyor.core.job import DEFAULT_MAX_ATTEMPTS, Job
    from conveyor.scheduler.models import Schedule

    text = " ".join(DESIGN.read_text(encoding="utf-8").split())
    s, exp = Settings(), inspect.signature(Backoff.exponential).parameters
    hours = exp["max"].default / 3600
    stated = [
        f"the limit on them (default {DEFAULT_MAX_ATTEMPTS};",
        f"lower `priority` runs first (default {Job.__dataclass_fields__['priority'].default})",
        f"`visibility_timeout` (default {s.visibility_timeout:g} s)",
        f"(default {s.max_lost}), not by the retry decision",
        f"`idempotency_ttl` seconds (default {s.idempotency_ttl:g},",
        f"({exp['base'].default:g} s, \u00d7{exp['factor'].default:g}, {hours:g} h,"
        f" ±{exp['jitter'].default * 100:g} %)",
        f"takes the defaults ({AutoBatch().max_jobs} jobs, no wait)",
        f"`{Schedule.__dataclass_fields__['misfire'].default}` (default:",
    ]
    assert [claim for claim in stated if claim not in text] == []
    assert AutoBatch().max_delay == 0
