"""s5-flowrest's flow-control changes on PostgreSQL where it differs from SQLite (the shared
code is ``broker/sqllimits.py``; the contract suite covers the semantics):

* The batched claim locks the head rows of its groups in a second statement (``SKIP LOCKED``):
  a head another transaction holds is skipped and its group looked at again shortly, the
  claim never waits for it and still serves the other groups.
* ``clear_queue`` removes the queue's flow groups and slot waits (``forget_queue``).
* An empty claim's ``next_due`` counts only the groups of the queues it serves.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor, FakeClock, RateLimit
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.broker.sqllimits import BUSY_S
from tests.support.flow_backlog import T0, WAITING, grouped_backlog

pytestmark = pytest.mark.timeout(60)


def _count(pg: PostgresBroker, sql: str) -> int:
    return int(pg._read(sql)[0][0])


def test_a_head_row_held_elsewhere_is_skipped_not_waited_for(
    pg: PostgresBroker, pg_server: Any
) -> None:
    app = Conveyor(pg, clock=FakeClock(T0))

    @app.task(name="t.fair", fair_by="tenant")
    def fair(tenant: str, i: int) -> None: ...

    held, free = fair.enqueue("x", 1), fair.enqueue("y", 1)
    with psycopg.connect(pg_server.url) as other:  # an operator's transaction holds x's head
        other.execute("SELECT 1 FROM conveyor.jobs WHERE id = %s FOR UPDATE", (held.id,))
        got: list[Any] = []
        claimer = threading.Thread(target=lambda: got.append(pg.claim(["default"], T0, limit=5)))
        claimer.start()
        claimer.join(10)
        assert not claimer.is_alive(), "the claim waited for a row another transaction holds"
        assert [lease.id for lease in got[0]] == [free.id]
        assert pg.claim(["default"], T0, limit=5) == []  # x is looked at again BUSY_S later
    later = pg.claim(["default"], T0 + BUSY_S, limit=5)
    assert [lease.id for lease in later] == [held.id]


def test_clear_queue_removes_group_rows_and_waits(pg: PostgresBroker) -> None:
    grouped_backlog(pg)
    assert _count(pg, "SELECT COUNT(*) FROM conveyor.flow_waiters") == 3
    assert pg.clear_queue("default", T0) == WAITING
    for table in ("flow_groups", "flow_waiters"):
        sql = f"SELECT COUNT(*) FROM conveyor.{table} WHERE queue = 'default'"
        assert _count(pg, sql) == 0, table
    assert _count(pg, "SELECT COUNT(*) FROM conveyor.flow_slots") == 3  # the running syncs
    assert _count(pg, "SELECT COUNT(*) FROM conveyor.flow_groups WHERE queue = 'other'") == 2


def test_an_empty_claim_sleeps_only_for_the_groups_it_serves(pg: PostgresBroker) -> None:
    app = Conveyor(pg, clock=FakeClock(T0))

    @app.task(name="t.call", rate_limit=RateLimit("1/m", key="customer"))
    def call(customer: str, i: int) -> None: ...

    call.enqueue("a", 1)
    call.enqueue("a", 2)
    assert len(pg.claim(["default"], T0, limit=5, visibility_timeout=600)) == 1
    throttled = pg.claim(["default"], T0, limit=5)
    assert throttled == [] and throttled.next_due == pytest.approx(T0 + 60, abs=1e-3)
    elsewhere = pg.claim(["elsewhere"], T0, limit=5)
    assert elsewhere == [] and elsewhere.next_due == pytest.approx(
        T0 + 600, abs=1e-3
    )  # the lease only
