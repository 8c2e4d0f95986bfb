"""The PostgreSQL part of the benchmark report: its own table, ratios against PostgreSQL peers."""

from __future__ import annotations

from typing import Any

from bench.harness import report, report_pg
from bench.harness.peers import BACKENDS, POSTGRES, SYSTEMS


def _system(enqueue: float, p50: float | None = None) -> dict[str, Any]:
    scen: dict[str, Any] = {"enqueue": {"rate": enqueue, report.CPU: 0.5}}
    if p50 is not None:
        scen["latency"] = {"default": {"p50_ms": p50}}
    return {"scenarios": scen}


def _row(table: str, label: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith(f"| {label}"))
    return [c.strip() for c in line.strip("|").split("|")]


DOC: dict[str, Any] = {
    "meta": {"postgres_version": "15.18"},
    "systems": {
        "conveyor": _system(10_000, 0.4),
        "huey": _system(2_000, 1.0),
        "conveyor-sqlite": _system(9_000, 3.0),
        "conveyor-postgres": _system(3_000, 1.0),
        "procrastinate": _system(1_500, 2.0),
        "pgqueuer": _system(1_000, 4.0),
    },
}


def test_postgres_table_compares_with_the_best_postgres_peer() -> None:
    table = report_pg.postgres_table(DOC)
    assert "PostgreSQL 15.18" in table
    head = _row(table, "metric")
    assert head[1:4] == ["conveyor-postgres", "procrastinate", "pgqueuer"]
    assert _row(table, "enqueue")[-2:] == ["procrastinate", "2.00x"]  # higher is better
    assert _row(table, "pickup p50, default")[-2:] == ["procrastinate", "0.50x"]  # lower is better
    assert "drain" not in table  # rows nobody measured are left out
    assert "Redis CPU" not in table  # a Redis server's CPU says nothing about PostgreSQL


def test_postgres_systems_stay_out_of_the_redis_table() -> None:
    table = report.main_table(DOC)
    assert "procrastinate" not in table and "pgqueuer" not in table
    assert "conveyor-postgres" not in table
    assert _row(table, "enqueue")[-2:] == ["huey", "5.00x"]


def test_conveyor_on_postgres_beside_redis_and_sqlite() -> None:
    table = report.backends_table(DOC)
    assert _row(table, "metric") == [
        "metric",
        "conveyor",
        "conveyor on sqlite",
        "conveyor on postgres",
    ]
    assert _row(table, "enqueue")[1:] == ["10,000", "9,000", "3,000"]
    assert "conveyor-postgres ÷ best PG peer" in report.render(DOC)


def test_postgres_systems_are_registered_and_not_embedded_backends() -> None:
    assert set(POSTGRES) <= set(SYSTEMS)
    assert not set(POSTGRES) & set(BACKENDS)
    assert report_pg.postgres_table({"systems": {"conveyor": _system(1)}}) == ""
