"""Issue 15's PostgreSQL concurrency-limit number (1,000 keys with ``ConcurrencyLimit(1)`` ≥ 0.50
of the no-limit drain, with margin): a claim + completion cycle of limited groups counted in
statements against a plain one, and the cases the merged statements must keep: a slot full in
the batch parks its group until the completion frees it (and wakes it), a head past its
``expires_at`` or undecodable takes no slot, and no slot row outlives its job."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import pq

from conveyor import ConcurrencyLimit, Conveyor, JobState
from conveyor.broker.base import Ack, Broker

from .test_flow_fair_cost import counted

pytest.importorskip("psycopg")


def _app(url: str) -> tuple[Conveyor, Any, Any, Any]:
    app = Conveyor(url)

    @app.task(name="conc", concurrency=ConcurrencyLimit(1, key="key"))
    def conc(key: str, i: int) -> None: ...

    @app.task(name="plain")
    def plain(key: str, i: int) -> None: ...

    @app.task(name="shared", concurrency=ConcurrencyLimit(1, key="account"), fair_by="tenant")
    def shared(account: str, tenant: str) -> None: ...

    return app, conc, plain, shared


def _cycles(broker: Broker, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """Statements of ``n`` cycles: a claim of 32 and the completion of its batch."""
    total, ids = 0, []
    for _ in range(n):
        with counted(monkeypatch) as statements:
            leases = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
            assert len(leases) == 32
            acks = [Ack(x.id, x.token) for x in leases]
            assert broker.complete(acks, time.time()) == [True] * 32
        total += sum(statements.values())
        ids += [x.id for x in leases]
    return total, ids


def _slots(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM conveyor.flow_slots").fetchone()
    return int(row[0]) if row else -1


def test_a_conc_cycle_costs_at_most_two_statements_more_than_a_plain_one(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups with ``ConcurrencyLimit(1)``: the claim picks the heads with their slots' running
    counts in one statement and takes the slots, parks or moves the groups and leases the jobs
    in a second (where it took five: heads, slot counts, new slots, group moves, leases); the
    completion frees the slots in its own write, after the flow lock sent in the same round
    trip (where it took three more round trips: the lock, the frees, the waiters)."""
    url = pg_server.new_database()
    app, conc, plain, _ = _app(url)
    app.enqueue_many([plain.spec("k", i) for i in range(128)])
    base, _ = _cycles(app.broker, 4, monkeypatch)
    app.enqueue_many([conc.spec(f"k{i % 100}", i) for i in range(200 + 32)])
    _cycles(app.broker, 1, monkeypatch)  # the first one learns that groups exist
    grouped, ids = _cycles(app.broker, 4, monkeypatch)
    assert grouped <= base + 2 * 4, (grouped, base)
    assert {app.broker.get(i).state for i in ids} == {JobState.COMPLETED}
    assert _slots(url) == 0
    app.close()


def test_a_full_slot_parks_its_group_until_the_completion_wakes_it(pg_server: Any) -> None:
    """Two groups share one slot (the same account, two tenants): the claim leases one head and
    parks the other group on the slot (due NULL, a waiter row); completing the first job frees
    the slot and makes the parked group due at once; the next claim leases it."""
    url = pg_server.new_database()
    app, _, _, shared = _app(url)
    first, second = shared.enqueue("acct", "a"), shared.enqueue("acct", "b")
    broker = app.broker
    [lease] = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert lease.id == first.id and _slots(url) == 1
    with psycopg.connect(url) as c:
        parked = c.execute("SELECT grp, due FROM conveyor.flow_groups").fetchall()
        waiters = c.execute("SELECT count(*) FROM conveyor.flow_waiters").fetchone()
    assert [due for _, due in parked] == [None] and waiters == (1,)
    assert broker.claim(["default"], time.time(), limit=32, visibility_timeout=60) == []
    assert broker.complete([Ack(lease.id, lease.token)], time.time()) == [True]
    with psycopg.connect(url) as c:
        assert c.execute("SELECT due FROM conveyor.flow_groups").fetchall() == [(0,)]
        assert c.execute("SELECT count(*) FROM conveyor.flow_waiters").fetchone() == (0,)
    [again] = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert again.id == second.id and _slots(url) == 1
    assert broker.complete([Ack(again.id, again.token)], time.time()) == [True]
    assert _slots(url) == 0
    app.close()


def test_expired_and_undecodable_conc_heads_take_no_slot(pg_server: Any) -> None:
    """A head past its ``expires_at`` expires and an undecodable one is dead-lettered; neither
    keeps a slot, so the next job of each group runs."""
    url = pg_server.new_database()
    app, conc, _, _ = _app(url)
    old = conc.options(expires_in=0.01).enqueue("a", 0)
    bad = conc.enqueue("b", 1)
    after_old, after_bad = conc.enqueue("a", 2), conc.enqueue("b", 3)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE conveyor.jobs SET payload = %s WHERE id = %s", (b"{not json", bad.id))
    time.sleep(0.05)
    broker = app.broker
    got = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    got += broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert sorted(x.id for x in got) == sorted([after_old.id, after_bad.id])
    assert broker.get(old.id).state is JobState.EXPIRED
    assert broker.get(bad.id).state is JobState.DEAD_LETTER
    assert _slots(url) == 2
    assert broker.complete([Ack(x.id, x.token) for x in got], time.time()) == [True, True]
    assert _slots(url) == 0
    app.close()


def test_a_head_admitted_then_found_undecodable_frees_its_slot(pg_server: Any) -> None:
    """A head whose envelope parses (its flow record readable: it is admitted and takes a
    slot without a full decode) but does not decode in full (an unknown envelope version) is
    dead-lettered when leased, and its slot frees at once: the next job of its key runs."""
    url = pg_server.new_database()
    app, conc, _, _ = _app(url)
    bad, after = conc.enqueue("a", 0), conc.enqueue("a", 1)
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT payload FROM conveyor.jobs WHERE id = %s", (bad.id,)).fetchone()
        assert row is not None
        data = orjson.loads(row[0]) | {"v": 99}
        c.execute(
            "UPDATE conveyor.jobs SET payload = %s WHERE id = %s", (orjson.dumps(data), bad.id)
        )
    broker = app.broker
    got = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    got += broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert [x.id for x in got] == [after.id]
    assert broker.get(bad.id).state is JobState.DEAD_LETTER
    assert _slots(url) == 1
    assert broker.complete([Ack(got[0].id, got[0].token)], time.time()) == [True]
    assert _slots(url) == 0
    app.close()


def test_a_process_that_did_not_claim_frees_the_slots_it_completes(pg_server: Any) -> None:
    """The completion takes the flow lock with its first statement only in a process whose
    claims took slots; another process completing such a job takes it on its own statement
    and still frees the slot and wakes the group waiting for it."""
    url = pg_server.new_database()
    app, _, _, shared = _app(url)
    first, second = shared.enqueue("acct", "a"), shared.enqueue("acct", "b")
    [lease] = app.broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert lease.id == first.id
    other = Conveyor(url)
    assert other.broker.complete([Ack(lease.id, lease.token)], time.time()) == [True]
    other.close()
    assert _slots(url) == 0
    [again] = app.broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert again.id == second.id
    app.close()


def _claim_trips(
    broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[Any]]:
    """Round trips of one claim of 32 (libpq's protocol trace: each ``Sync`` or simple
    ``Query`` the client sends ends a batch it waits on), and its leases."""
    path = tmp_path / "trace"
    with path.open("w") as out:
        real = broker._connection

        @contextmanager
        def traced() -> Iterator[Any]:
            with real() as conn:
                conn.pgconn.trace(out.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
                try:
                    yield conn
                finally:
                    conn.pgconn.untrace()

        monkeypatch.setattr(broker, "_connection", traced)
        leases = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
        monkeypatch.undo()
    sent = [x.split("\t") for x in path.read_text().splitlines()]
    return sum(1 for x in sent if x[:3:2] in (["F", "Sync"], ["F", "Query"])), leases


def test_a_fair_claim_is_two_round_trips_like_a_plain_one(
    pg_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that sees flow groups sends the first queue's claim of fair-only groups with
    its look-up (guarded, under the flow lock the look-up takes): a fair claim is two round
    trips (that one; the settle statement with COMMIT), as a plain claim is, where it was
    three (the look-up on its own)."""
    url = pg_server.new_database()
    app = Conveyor(url)

    @app.task(name="fair", fair_by="key")
    def fair(key: str, i: int) -> None: ...

    app.enqueue_many([fair.spec(f"k{i % 50}", i) for i in range(200)])
    broker = app.broker
    assert len(broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)) == 32
    trips, leases = _claim_trips(broker, tmp_path, monkeypatch)
    assert len(leases) == 32
    assert trips <= 2, trips
    assert len({x.job.args[0] for x in leases}) == 32  # one job per group: round-robin kept
    app.close()


def test_a_conc_claim_reads_its_first_heads_with_the_look_up(
    pg_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue served the general way (groups with a limiter) gets its first batch of heads
    read in the look-up's round trip (guarded, under the flow lock): a claim of 32
    ``ConcurrencyLimit(1)`` jobs is three round trips (look-up and heads; the batch's end;
    the settle statement with COMMIT), where it was four."""
    url = pg_server.new_database()
    app, conc, _, _ = _app(url)
    app.enqueue_many([conc.spec(f"k{i % 100}", i) for i in range(300)])
    broker = app.broker
    for _ in range(2):  # the process learns that groups exist, and that they have limiters
        leases = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
        assert broker.complete([Ack(x.id, x.token) for x in leases], time.time()) == [True] * 32
    trips, leases = _claim_trips(broker, tmp_path, monkeypatch)
    assert len(leases) == 32 and _slots(url) == 32
    assert trips <= 3, trips
    app.close()


def test_a_plain_queue_beside_a_grouped_one_sends_the_fair_statement_once(
    pg_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flow groups wait in another queue: a claim of the plain queue takes the flow path (the
    look-up sees groups) and its fair statement, sent with the look-up, finds nothing there
    (its guards passed, nothing new in ``flow_pending``), so the claim does not send it again:
    the heads (none) and the plain claim follow, four round trips, where the fair statement's
    second run made five."""
    url = pg_server.new_database()
    app, _, plain, _ = _app(url + "?pool_size=1")  # (every statement prepared once)

    @app.task(name="elsewhere", queue="other", fair_by="key")
    def elsewhere(key: str) -> None: ...

    app.enqueue_many([elsewhere.spec(f"k{i}") for i in range(4)])
    app.enqueue_many([plain.spec("k", i) for i in range(96)])
    broker = app.broker
    assert len(broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)) == 32
    trips, leases = _claim_trips(broker, tmp_path, monkeypatch)
    assert len(leases) == 32 and {x.job.task for x in leases} == {"plain"}
    assert trips <= 4, trips
    app.close()
