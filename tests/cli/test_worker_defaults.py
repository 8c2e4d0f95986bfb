"""Defaults of ``conveyor worker`` that are security relevant."""

from __future__ import annotations

from pathlib import Path

from conveyor.cli.worker_cmd import worker_command

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_metrics_host_defaults_to_loopback() -> None:
    option = next(p for p in worker_command.params if p.name == "metrics_host")
    assert option.default == "127.0.0.1"
    assert "(default `127.0.0.1`" in DOCS.read_text().split("--metrics-port P")[1].splitlines()[0]
