"""The one-statement claim of fair-only groups (postgres/flow.py ``_FAIR``): the rows it meets
that are not plain leases behave as on the general flow path and the plain claim — a head
past its ``expires_at`` expires, an undecodable head is dead-lettered, a head another
transaction holds leaves its group due a little later, a group with a limiter in the same
queue is served by the general path in its round-robin turn, and run-time overrides send the
claim the general way."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from conveyor import ConcurrencyLimit, Conveyor, JobState
from conveyor.broker.base import Ack

pytest.importorskip("psycopg")


def _app(url: str) -> tuple[Conveyor, Any, Any]:
    app = Conveyor(url)

    @app.task(name="fair", fair_by="key")
    def fair(key: str, i: int) -> None: ...

    @app.task(name="conc", concurrency=ConcurrencyLimit(1, key="key"))
    def conc(key: str, i: int) -> None: ...

    return app, fair, conc


def _claim(app: Conveyor, limit: int = 32) -> list[Any]:
    return app.broker.claim(["default"], time.time(), limit=limit, visibility_timeout=60)


def test_expired_and_undecodable_heads_do_not_lease(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, _ = _app(url)
    old = fair.options(expires_in=0.01).enqueue("a", 0)
    bad = fair.enqueue("b", 1)
    good = fair.enqueue("c", 2)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE conveyor.jobs SET payload = %s WHERE id = %s", (b"{not json", bad.id))
    time.sleep(0.05)
    leases = _claim(app)
    assert [x.id for x in leases] == [good.id]
    assert app.broker.get(old.id).state is JobState.EXPIRED
    assert app.broker.get(bad.id).state is JobState.DEAD_LETTER
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM conveyor.flow_groups").fetchone() == (0,)
    app.close()


def test_a_held_head_waits_and_other_groups_go_on(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, _ = _app(url)
    held, free = fair.enqueue("a", 0), fair.enqueue("b", 1)
    _claim(app, 0)  # the groups are scheduled
    with psycopg.connect(url) as other:
        other.execute("SELECT 1 FROM conveyor.jobs WHERE id = %s FOR UPDATE", (held.id,))
        assert [x.id for x in _claim(app)] == [free.id]
        other.rollback()
    time.sleep(0.1)  # sqllimits.BUSY_S
    assert [x.id for x in _claim(app)] == [held.id]
    app.close()


def test_a_limited_group_in_the_queue_keeps_its_turn(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, conc = _app(url)
    ids = [fair.enqueue("a", 0).id, conc.enqueue("x", 1).id, fair.enqueue("b", 2).id]
    ids += [conc.enqueue("x", 3).id, fair.enqueue("a", 4).id]
    first = [x.id for x in _claim(app)]
    assert sorted(first) == sorted(ids[:3] + ids[4:]), first  # the second conc job waits
    assert app.broker.complete([Ack(x.id, x.token) for x in _claim(app)], time.time()) == []
    app.close()


def test_run_time_overrides_send_the_claim_the_general_way(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, conc = _app(url)
    app.set_limit("conc:conc", 2)
    ids = [conc.enqueue("x", 0).id, conc.enqueue("x", 1).id, fair.enqueue("a", 2).id]
    assert sorted(x.id for x in _claim(app)) == sorted(ids)  # two of key x: the override
    app.close()
