"""The PostgreSQL completion in two round trips, retention caps included (issue 17: drain).

A completion used to pay three round trips: the row locks (with BEGIN), then the completion's
``UPDATE`` with the settle statement, whose per-queue totals the client read to decide the
retention caps (``Retention.completed_max`` / ``dead_letter_max``), then COMMIT. The cap is
now a statement of its own sent in the same batch as the settle statement and COMMIT
(``postgres/commit.py``, ``_CAP``): it reads the totals the settle statement just wrote (rows
this transaction holds locked), deletes the oldest finished jobs over the cap and corrects the
counts, so the client never waits on the totals. Round trips are counted from libpq's
protocol trace (the ``trips`` fixture of test_round_trips.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.config import Retention
from conveyor.core.job import Job
from tests.postgres.test_round_trips import trips  # noqa: F401  (the fixture)


@pytest.fixture
def pg(pg_server: Any) -> Any:
    """A flushed broker keeping at most 3 completed jobs and 2 dead letters per queue (the
    ``trips`` fixture traces it; test_round_trips.py counts the default retention's trips)."""
    broker = PostgresBroker.from_url(pg_server.url, Retention(completed_max=3, dead_letter_max=2))
    broker.flush_all()
    yield broker
    broker.close()


def _stored(b: PostgresBroker, state: str) -> list[str]:
    rows = b._read("SELECT id FROM {S}.jobs WHERE state = %s ORDER BY seq", (state,))
    return [r[0] for r in rows]


def _run(b: PostgresBroker, ids: list[str], now: float) -> list[bool]:
    b.enqueue([Job(id=i, task="t") for i in ids], now)
    leases = b.claim(["default"], now, limit=len(ids))
    assert sorted(x.job.id for x in leases) == sorted(ids)
    by_id = {x.job.id: x for x in leases}
    return b.complete([Ack(i, by_id[i].token) for i in ids], now)


def test_a_completion_over_the_cap_takes_two_round_trips(
    pg: PostgresBroker,
    trips: Any,  # noqa: F811
) -> None:
    b = pg
    now = time.time()
    for i in range(3):  # every pooled connection has prepared the statements
        _run(b, [f"warm{i}"], now)
    b.enqueue([Job(id=f"j{i}", task="t") for i in range(4)], now)
    leases = b.claim(["default"], now, limit=8)
    before = trips()
    assert b.complete([Ack(x.job.id, x.token) for x in leases], now) == [True] * 4
    n = trips() - before
    assert n == 2, f"a completion took {n} round trips"
    assert len(_stored(b, "completed")) == 3  # 7 completed, capped to the 3 latest
    assert b.counts()["default"]["completed"] == 3


def test_the_cap_keeps_the_newest_completed_jobs_and_exact_counts(pg: PostgresBroker) -> None:
    now = time.time()
    _run(pg, ["a", "b"], now)
    assert _stored(pg, "completed") == ["a", "b"]
    _run(pg, ["c", "d"], now)
    assert _stored(pg, "completed") == ["b", "c", "d"]
    _run(pg, ["e", "f", "g", "h", "i"], now)
    assert _stored(pg, "completed") == ["g", "h", "i"]
    assert pg.counts()["default"]["completed"] == 3
    assert pg.get("a") is None and pg.get("i") is not None


def test_the_dead_letter_cap_applies_in_the_same_batch(pg: PostgresBroker) -> None:
    now = time.time()
    for i in range(4):
        pg.enqueue([Job(id=f"d{i}", task="t")], now)
        (lease,) = pg.claim(["default"], now, limit=1)
        pg.fail(f"d{i}", lease.token, now, error={"type": "E", "message": "x"}, retry_at=None)
    assert _stored(pg, "dead_letter") == ["d2", "d3"]
    assert pg.counts()["default"]["dead_letter"] == 2


def test_concurrent_completions_keep_the_cap_exactly(pg: PostgresBroker) -> None:
    """Two threads completing in the same queue serialise on the count row: neither deletes
    on totals the other has changed (the cap is read after the lock, in the same batch)."""
    now = time.time()
    ids = [f"c{i:03}" for i in range(120)]
    pg.enqueue([Job(id=i, task="t") for i in ids], now)
    leases = pg.claim(["default"], now, limit=len(ids))
    halves = [leases[0::2], leases[1::2]]
    errors: list[BaseException] = []

    def complete(part: list[Any]) -> None:
        try:
            for k in range(0, len(part), 3):
                pg.complete([Ack(x.job.id, x.token) for x in part[k : k + 3]], now)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=complete, args=(h,)) for h in halves]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert len(_stored(pg, "completed")) == 3
    assert pg.counts()["default"]["completed"] == 3
