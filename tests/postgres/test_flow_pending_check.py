"""The claim's "anything newly enqueued in a flow group?" check (``flow_pending``) costs a few
pages whatever the table's dead pages: after 20,000 grouped enqueues were drained, and until
VACUUM runs, ``EXISTS (SELECT 1 FROM flow_pending)`` walked every emptied heap page (148 of
them: ~1.5-2 µs per job of a flow drain). The check reads an index range that starts past the
drained rows (schema version 7: ``flow_pending.x`` and ``flow_mark``)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor
from conveyor.broker.postgres import claim
from conveyor.broker.postgres.flow_sql import _DRAIN, _FLOWING

pytest.importorskip("psycopg")

ROWS = 20_000


def _buffers(c: Any, sql: str) -> int:
    """Shared buffers (hit + read) that one run of ``sql`` spent on its ``flow_pending`` check
    (the InitPlans reading that table or its indexes; EXPLAIN ANALYZE BUFFERS)."""
    plan = c.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}").fetchone()[0][0]["Plan"]
    checks = [p for p in plan.get("Plans", []) if "flow_pending" in str(p)]
    assert checks, plan
    return sum(int(p["Shared Hit Blocks"]) + int(p["Shared Read Blocks"]) for p in checks)


def _fill_and_drain(url: str, app: Conveyor) -> None:
    """``ROWS`` grouped enqueues' ``flow_pending`` rows, drained as a claim does; no VACUUM."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ALTER TABLE conveyor.flow_pending SET (autovacuum_enabled = false)")
        c.execute(
            "INSERT INTO conveyor.flow_pending (queue, grp) SELECT 'default', 'fair:k=' || i"
            " FROM generate_series(1, %s) AS i",
            (ROWS,),
        )
    broker: Any = app.broker
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(broker.sql(_DRAIN))  # what a flow claim runs (under its lock)
        c.execute("DELETE FROM conveyor.flow_groups")  # the groups are empty: forgotten
        assert c.execute("SELECT count(*) FROM conveyor.flow_pending").fetchone()[0] == 0
        pages = c.execute("SELECT pg_relation_size('conveyor.flow_pending') / 8192").fetchone()
        assert pages[0] > 100  # the emptied pages are still there


@pytest.mark.parametrize("stats", ["none", "analyzed"])
def test_the_pending_check_reads_a_few_pages_after_a_drain(pg_server: Any, stats: str) -> None:
    url = pg_server.new_database()
    app = Conveyor(url)
    _fill_and_drain(url, app)
    broker: Any = app.broker
    with psycopg.connect(url, autocommit=True) as c:
        if stats == "analyzed":  # the statistics say the table is empty
            c.execute("ANALYZE conveyor.flow_pending")
        for sql in (claim._LOOKUP, _FLOWING):
            _buffers(c, broker.sql(sql))  # a first run may still set hint bits
            assert _buffers(c, broker.sql(sql)) < 20, sql
    app.close()


def test_a_group_enqueued_after_a_drain_is_still_found(pg_server: Any) -> None:
    url = pg_server.new_database()
    app = Conveyor(url)
    ran: list[str] = []

    @app.task(name="fair", fair_by="tenant")
    def fair(tenant: str) -> None:
        ran.append(tenant)

    _fill_and_drain(url, app)
    fair.enqueue("a")
    leases = app.broker.claim(["default"], time.time(), limit=5)
    assert [lease.job.args for lease in leases] == [["a"]]
    app.close()


def test_a_row_committed_after_a_drain_that_could_not_see_it_is_found(pg_server: Any) -> None:
    url = pg_server.new_database()
    app = Conveyor(url)
    broker: Any = app.broker
    check = broker.sql(_FLOWING)
    with psycopg.connect(url) as late, psycopg.connect(url, autocommit=True) as c:
        # an enqueue whose transaction is still open while later ones commit and are drained
        late.execute("INSERT INTO conveyor.flow_pending (queue, grp) VALUES ('default', 'late')")
        c.execute(
            "INSERT INTO conveyor.flow_pending (queue, grp) SELECT 'default', 'g' || i"
            " FROM generate_series(1, 100) AS i"
        )
        c.execute(broker.sql(_DRAIN))
        assert c.execute(check).fetchone()[1] is False  # nothing the check can see yet
        late.commit()
        assert c.execute(check).fetchone()[1] is True
        c.execute(broker.sql(_DRAIN))
        assert c.execute(check).fetchone()[1] is False
        groups = c.execute("SELECT grp FROM conveyor.flow_groups WHERE grp = 'late'").fetchall()
        assert groups == [("late",)]
    app.close()
