"""When do the emptied heap pages of the PostgreSQL flow tables go after a fair drain?

    PYTHONPATH=$PWD/src:. /work/main/.venv/bin/python bench/pg_flow_vacuum.py [naptime_s]

Starts a private cluster (``tests/support/pg_proc.py``) with ``autovacuum_naptime`` set (2 s by
default), then per per-table autovacuum setting of ``flow_pending`` and ``flow_groups`` (the
server's defaults, ``scale_factor 0 + threshold 1000``, ``0 + 20``) enqueues 20,000 fair jobs
over 10,000 groups in four bursts, drains them in claims of 32 and prints each table's pages,
autovacuum runs and dead rows at the end of the drain and at intervals after it, plus the time
of ``SELECT EXISTS (SELECT 1 FROM flow_pending)`` over 20,000 emptied rows before and after a
vacuum. Used for docs/architecture-postgres.md ("Vacuum"): the settings do not change when the
pages go; ``autovacuum_naptime`` does.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import psycopg
from tests.support.pg_proc import PgServer

from conveyor import Conveyor
from conveyor.broker.base import Ack

SETTINGS: dict[str, tuple[int, int] | None] = {
    "default": None,
    "0+1000": (0, 1000),
    "0+20": (0, 20),
}
TABLES = ("flow_pending", "flow_groups")
EXISTS = "SELECT EXISTS (SELECT 1 FROM conveyor.flow_pending)"


def state(c: Any) -> str:
    """Pages, autovacuum runs and dead rows of each table."""
    out = []
    for t in TABLES:
        pages = c.execute(f"SELECT pg_relation_size('conveyor.{t}') / 8192").fetchone()[0]
        runs, dead = c.execute(
            "SELECT autovacuum_count, n_dead_tup FROM pg_stat_user_tables"
            " WHERE schemaname = 'conveyor' AND relname = %s",
            (t,),
        ).fetchone()
        out.append(f"{t} {pages} pages, {runs} autovacuums, {dead} dead")
    return "; ".join(out)


def exists_cost(c: Any) -> str:
    """Pages and µs (server execution, min of 20) of the claim's EXISTS on flow_pending."""
    best, hit = float("inf"), 0
    for _ in range(20):
        plan = c.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + EXISTS).fetchone()[0][0]
        best, hit = min(best, plan["Execution Time"] * 1000), plan["Plan"]["Shared Hit Blocks"]
    return f"EXISTS reads {hit} pages, {best:.1f} µs"


def drain(url: str, name: str, setting: tuple[int, int] | None, naptime: float) -> None:
    """One fair drain under ``setting``, then the tables' state as autovacuum comes round."""
    app = Conveyor(url)

    @app.task(name="fair", fair_by="key")
    def fair(key: str, i: int) -> None: ...

    with psycopg.connect(url, autocommit=True) as c:
        for t in TABLES:
            if setting is None:
                c.execute(
                    f"ALTER TABLE conveyor.{t} RESET"
                    " (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)"
                )
            else:
                c.execute(
                    f"ALTER TABLE conveyor.{t} SET (autovacuum_vacuum_scale_factor ="
                    f" {setting[0]}, autovacuum_vacuum_threshold = {setting[1]})"
                )
        for _ in range(4):  # bursts, as producers send them
            app.enqueue_many([fair.spec(f"k{i % 10000}", i) for i in range(5000)])
        while leases := app.broker.claim(["default"], time.time(), limit=32):
            app.broker.complete([Ack(x.id, x.token) for x in leases], time.time())
        start = time.monotonic()
        print(f"{name}: end of drain: {state(c)}", flush=True)
        for after in (1.5, 2.5, 5):
            time.sleep(naptime * after - (time.monotonic() - start))
            print(f"{name}: +{naptime * after:.0f} s: {state(c)}", flush=True)
    app.close()


def main() -> None:
    """Every setting on a fresh database of one cluster."""
    naptime = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    with PgServer() as srv:
        with psycopg.connect(srv.url, autocommit=True) as c:
            c.execute(f"ALTER SYSTEM SET autovacuum_naptime = '{naptime}s'")
            c.execute("SELECT pg_reload_conf()")
        url = srv.new_database()
        Conveyor(url).close()
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("ALTER TABLE conveyor.flow_pending SET (autovacuum_enabled = false)")
            c.execute(
                "INSERT INTO conveyor.flow_pending (queue, grp)"
                " SELECT 'q', 'g' || i FROM generate_series(1, 20000) i"
            )
            c.execute("DELETE FROM conveyor.flow_pending")
            print("20,000 rows deleted:", exists_cost(c), flush=True)
            c.execute("VACUUM conveyor.flow_pending")
            print("after VACUUM:", exists_cost(c), flush=True)
        for name, setting in SETTINGS.items():
            drain(srv.new_database(), name, setting, naptime)


if __name__ == "__main__":
    main()
