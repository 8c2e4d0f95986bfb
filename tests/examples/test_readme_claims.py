"""README.md's promises about the project itself hold: the sections a newcomer needs are there,
the two commands do what it says, and every backend URL it and docs/ show has a real scheme.
(Its code blocks run in test_examples_readme.py; its settings, CLI lines and metrics are
checked by test_docs_names.py and test_docs_cli.py.)"""

from __future__ import annotations

import re
from pathlib import Path

from conveyor.broker.factory import SCHEMES
from conveyor.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _targets() -> dict[str, tuple[list[str], list[str]]]:
    """Makefile target -> (prerequisites, recipe lines)."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    current = None
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        rule = re.match(r"^([\w-]+):\s*([^=#]*)", line)
        if rule and not line.startswith("\t"):
            current = rule.group(1)
            found[current] = (rule.group(2).split(), [])
        elif line.startswith("\t") and current:
            found[current][1].append(line.strip())
    return found


def test_the_sections_a_newcomer_needs() -> None:
    headings = re.findall(r"^## (.+)$", README, re.M)
    for needed in (
        "Install",
        "Quickstart",
        "Delivery guarantee",
        "Choosing a backend",
        "Two commands",
    ):
        assert any(h.startswith(needed) for h in headings), needed
    assert "at-least-once" in README.split("## Install", 1)[0]  # what it is, first


def test_the_two_commands_do_what_the_readme_says() -> None:
    targets = _targets()
    assert "setup" in targets["demo"][0] and targets["demo"][1] == ["$(VENV)/bin/conveyor demo"]
    assert set(targets["check"][0]) == {"lint", "test"}
    lint = " ".join(targets["lint"][1])
    for step in ("ruff check", "ruff format --check", "mypy --strict"):
        assert step in lint, step
    assert targets["test"][1] == ["$(PY) -m pytest -q"]  # the whole suite
    assert "setup" in targets["lint"][0] + targets["test"][0]  # "installs everything" first
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make check$", ci, re.M) and 'conveyor" demo' in ci


def test_the_delivery_guarantee_numbers() -> None:
    section = README.split("## Delivery guarantee", 1)[1].split("\n## ", 1)[0]
    assert f"default {Settings().max_lost}" in section


def test_every_backend_url_shown_has_a_real_scheme() -> None:
    texts = [README] + [p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")]
    shown = {m for t in texts for m in re.findall(r"[`\"'(]([a-z][a-z0-9+]*)://", t)}
    not_brokers = {"http", "https", "postgresql+psycopg"}  # web addresses; SQLAlchemy's URL
    assert shown - not_brokers <= set(SCHEMES), shown - not_brokers - set(SCHEMES)
    assert {"memory", "sqlite", "postgresql", "redis"} <= shown
