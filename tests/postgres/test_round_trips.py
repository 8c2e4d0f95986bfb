"""Round trips per hot transaction of the PostgreSQL backend (issue 17: drain and pickup).

Counted on the real cluster from libpq's protocol trace: every ``Sync`` (or simple ``Query``)
the client sends ends a batch it then waits on, i.e. one round trip. A transaction used to pay one
each for BEGIN, every statement, the two settle statements and COMMIT (5 for a single
enqueue, 6-7 for a claim or a completion); BEGIN now travels with the first statement and
the settle statement with COMMIT (psycopg pipeline mode), events, counts and NOTIFY settle in
one statement, and an enqueue sends everything in one batch (a taken id still raises
``DuplicateJob`` and stores nothing).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.errors import DuplicateJob


@pytest.fixture
def trips(pg: PostgresBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Round trips of ``pg``'s pooled connections: libpq's protocol trace of each, counting
    the messages that end a batch the client then waits on (``Sync``, a simple ``Query``)."""
    path = tmp_path / "trace"
    out = path.open("w")
    real = pg._connection

    @contextmanager
    def traced() -> Iterator[Any]:
        with real() as conn:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                yield conn
            finally:
                conn.pgconn.untrace()  # flushes the trace

    def count() -> int:
        lines = path.read_text().splitlines()
        return sum(1 for x in lines if x.split("\t")[:3:2] in (["F", "Sync"], ["F", "Query"]))

    count.text = lambda: path.read_text()  # type: ignore[attr-defined]

    monkeypatch.setattr(pg, "_connection", traced)
    yield count
    out.close()


def _measure(trips: Any, fn: Any) -> tuple[int, Any]:
    before = trips()
    out = fn()
    return trips() - before, out


def test_enqueue_claim_and_complete_take_few_round_trips(pg: PostgresBroker, trips: Any) -> None:
    now = time.time()
    for i in range(3):  # the pool's connections, each statement prepared on each
        pg.enqueue([Job(id=f"warm{i}", task="t")], now)
        pg.complete([Ack(x.job.id, x.token) for x in pg.claim(["default"], now, limit=4)], now)

    n, _ = _measure(trips, lambda: pg.enqueue([Job(id="one", task="t")], now))
    assert n == 1, f"a single enqueue took {n} round trips"
    pg.enqueue([Job(id=f"j{i}", task="t") for i in range(5)], now)

    n, claimed = _measure(trips, lambda: pg.claim(["default"], now, limit=32))
    assert len(claimed) == 6
    assert n <= 2, f"a claim took {n} round trips"

    acks = [Ack(x.job.id, x.token) for x in claimed]
    n, done = _measure(trips, lambda: pg.complete(acks, now))
    assert done == [True] * 6
    assert n <= 2, f"a completion took {n} round trips"
    assert pg.counts()["default"]["completed"] == 9
    assert [e["type"] for e in pg.events.read(None, 100)[0]].count("completed") == 9


def test_a_taken_id_still_refuses_the_whole_batch(pg: PostgresBroker) -> None:
    now = time.time()
    pg.enqueue([Job(id="taken", task="t")], now)
    with pytest.raises(DuplicateJob, match="taken"):
        pg.enqueue([Job(id="new", task="t"), Job(id="taken", task="t")], now)
    assert pg.get("new") is None
    assert pg.counts()["default"]["pending"] == 1
    assert pg.enqueue([Job(id="new", task="t")], now)[0].duplicate is False  # usable again


def test_only_the_claim_commits_without_waiting_for_the_disk(
    pg: PostgresBroker, trips: Any
) -> None:
    """The claim's transaction sets ``synchronous_commit = off`` (a claim lost in a crash
    leaves the job pending: at-least-once, as a lost lease); enqueue and completion keep the
    durable COMMIT."""
    now = time.time()
    sent: dict[str, str] = {}
    for name, step in (
        ("enqueue", lambda: pg.enqueue([Job(id="a", task="t")], now)),
        ("claim", lambda: sent.setdefault("lease", pg.claim(["default"], now, limit=2))),
        ("complete", lambda: pg.complete([Ack(x.id, x.token) for x in sent["lease"]], now)),
    ):
        before = len(trips.text())
        step()
        sent[name] = trips.text()[before:]
    assert "synchronous_commit" in sent["claim"]
    assert "synchronous_commit" not in sent["enqueue"] + sent["complete"]
    assert pg.get("a").state.value == "completed"
