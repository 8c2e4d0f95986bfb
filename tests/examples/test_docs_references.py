"""Every file and Python name README.md and docs/*.md cite exists: ``tests/...``, ``bench/...``,
``scripts/...``, ``examples/...`` paths, source paths (``broker/redis/claim.lua``,
``core/state.py::TRANSITIONS``) and dotted names (``conveyor.monitoring.prometheus.
start_metrics_server``). A dotted name that is not importable must be a name the code writes
(an OpenTelemetry attribute such as ``conveyor.job_id``, a storage key such as ``conveyor.tz``),
i.e. a string literal in src/ or the dashboard's assets.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "conveyor"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_SOURCE_DIRS = "broker|core|worker|monitoring|scheduler|dashboard|contrib|cli|workflow"


def _text(doc: Path) -> str:
    return doc.read_text(encoding="utf-8")


def cited_files(text: str) -> set[str]:
    """Repository paths (from the root) and source paths (under src/conveyor/); the old name
    of a rename note (`` `old.py` → `new.py` ``) is history, not a citation."""
    text = re.sub(r"`[^`]+` → ", "", text)
    found = set(
        re.findall(
            r"\b((?:tests|bench|scripts|examples)/[\w/.-]*\w\.(?:py|sh|md|yml|yaml|toml))\b", text
        )
    )
    found |= {
        f"src/conveyor/{p}" for p in re.findall(rf"`((?:{_SOURCE_DIRS})/[\w/]+\.(?:py|lua))", text)
    }
    return found


def cited_symbols(text: str) -> set[tuple[str, str]]:
    """(file, name) of every ``<file>::<name>`` citation: a source file (under src/conveyor/)
    or a test, benchmark or script (from the repository root)."""
    found = {
        (f"src/conveyor/{path}", name)
        for path, name in re.findall(rf"`((?:{_SOURCE_DIRS})/[\w/]+\.py)::(\w+)", text)
    }
    own = r"\b((?:tests|bench|scripts|examples)/[\w/.-]+\.py)::(\w+)"
    return found | set(re.findall(own, text))


def resolves(dotted: str) -> bool:
    """``conveyor.a.b.c``: import the longest module prefix, then getattr the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            lazy = (
                isinstance(obj, ModuleType) and attr not in vars(obj) and "__getattr__" in vars(obj)
            )
            if lazy:  # built on first access (conveyor.contrib.django.app needs a Django project)
                return re.search(rf"\b{attr}\b", inspect.getsource(obj)) is not None
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _written_names() -> str:
    files = [*SRC.rglob("*.py"), *SRC.rglob("*.js"), *SRC.rglob("*.html")]
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_file_exists(doc: Path) -> None:
    text = _text(doc)
    missing = sorted(p for p in cited_files(text) if not (ROOT / p).exists())
    assert missing == []
    absent = sorted(
        f"{path}::{name}"
        for path, name in cited_symbols(text)
        if not re.search(
            rf"^\s*(?:def |class |async def )?{name}\b", (ROOT / path).read_text("utf-8"), re.M
        )
    )
    assert absent == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_dotted_conveyor_name_resolves_or_is_written(doc: Path) -> None:
    written = _written_names()
    names = set(re.findall(r"`(conveyor(?:\.[A-Za-z_]\w*)+)", _text(doc)))
    wrong = sorted(
        n for n in names if not resolves(n) and f'"{n}"' not in written and f"'{n}'" not in written
    )
    assert wrong == []


def test_the_checks_catch_planted_mistakes() -> None:
    assert not resolves("conveyor.monitoring.prometheus.start_metric_server")
    assert resolves("conveyor.monitoring.prometheus.start_metrics_server")
    assert cited_files("see `broker/redis/lua/claim.lua` and tests/core/test_nothing.py") == {
        "src/conveyor/broker/redis/lua/claim.lua",
        "tests/core/test_nothing.py",
    }
    assert not (ROOT / "tests/core/test_nothing.py").exists()
    assert cited_symbols("`core/state.py::TRANSITION`") == {
        ("src/conveyor/core/state.py", "TRANSITION")
    }
