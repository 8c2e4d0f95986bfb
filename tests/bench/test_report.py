"""The benchmark report's pure logic: ratios against the best peer, the backends table."""

from __future__ import annotations

from typing import Any

from bench.harness import report
from bench.harness.peers import BACKENDS, PEERS


def _system(enqueue: float, p50: float | None = None) -> dict[str, Any]:
    scen: dict[str, Any] = {"enqueue": {"rate": enqueue}}
    if p50 is not None:
        scen["latency"] = {"default": {"p50_ms": p50}}
    return {"scenarios": scen}


def _row(table: str, label: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith(f"| {label}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_ratio_uses_the_best_peer_and_ignores_conveyor_backends() -> None:
    doc = {
        "systems": {
            "conveyor": _system(3000, 2.0),
            "huey": _system(2000, 1.0),
            "rq": _system(1000, 4.0),
            "conveyor-sqlite": _system(90_000, 0.1),
        }
    }
    table = report.main_table(doc)
    assert "conveyor-sqlite" not in table
    assert _row(table, "enqueue")[-2:] == ["huey", "1.50x"]  # higher is better
    assert _row(table, "pickup p50, default")[-2:] == ["huey", "2.00x"]  # lower is better


def test_backends_table_shows_absolute_figures_side_by_side() -> None:
    doc = {
        "systems": {
            "conveyor": _system(3000),
            "conveyor-sqlite": _system(2000),
            "conveyor-memory": _system(7000),
        }
    }
    table = report.backends_table(doc)
    assert _row(table, "metric") == [
        "metric",
        "conveyor",
        "conveyor on sqlite",
        "conveyor on memory",
    ]
    assert _row(table, "enqueue") == ["enqueue, 1 call/job (jobs/s)", "3,000", "2,000", "7,000"]
    assert "drain" not in table  # rows nobody measured are left out


def test_no_backends_no_table_and_backends_are_not_peers() -> None:
    assert report.backends_table({"systems": {"conveyor": _system(1)}}) == ""
    assert not set(BACKENDS) & set(PEERS)
