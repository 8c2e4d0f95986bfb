"""A worker-side write chosen by PostgreSQL as a deadlock victim is run again inside the broker
(``postgres/retry.py``), on a real cluster: a second connection takes row locks in the order
opposite to the write's, the write waited first so its deadlock check runs first and it is the
victim; it rolls back whole, and the retry lands once the other transaction commits. Every job
ends recorded exactly once, and the worker logs no outage and no traceback for it."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg

from conveyor import Conveyor, JobState
from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.broker.postgres.retry import Retry, retry_transient
from conveyor.errors import BrokerUnavailable

#: the settle statement's first lock (``postgres/commit.py``): every write with events takes it
META = "SELECT 1 FROM conveyor.meta WHERE key = 'event' FOR UPDATE"
ROW = "SELECT 1 FROM conveyor.jobs WHERE id = ANY(%s) ORDER BY rid FOR UPDATE"


def _waiting(url: str, other: int) -> list[str]:
    """The queries of backends (not ``other``) waiting for a lock."""
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(
            "SELECT a.query FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE NOT l.granted AND l.pid <> %s",
            (other,),
        ).fetchall()
    return [r[0] for r in rows]


def _deadlock(
    url: str, first: tuple[str, Any], then: tuple[str, Any], write: Callable[[], Any]
) -> Any:
    """Run ``write`` on a thread while another transaction holds ``first``'s locks; once the
    write waits, the other transaction asks for ``then``'s (held by the write): a deadlock
    whose victim is the write. The other transaction commits as soon as it gets its locks.
    Returns what ``write`` returned or raised."""
    other = psycopg.connect(url)
    other.execute("SET deadlock_timeout = '10s'")  # the write's check (1 s) runs first
    other.execute(*first)
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(write())
        except Exception as exc:  # reported by the caller's assertion
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while not _waiting(url, other.info.backend_pid):
        assert time.monotonic() < deadline, "the write never waited for the other transaction"
        time.sleep(0.01)
    other.execute(*then)  # granted once the victim rolled back
    other.commit()
    thread.join(60)
    assert not thread.is_alive()
    other.close()
    return out[0]


@pytest.fixture
def broker(pg_server: Any) -> Any:
    b = PostgresBroker.from_url(pg_server.url)
    b.flush_all()
    b.retry = Retry(random.Random(7))
    yield b
    b.close()


def _jobs(broker: PostgresBroker, n: int) -> tuple[Conveyor, list[Any]]:
    app = Conveyor(broker)

    @app.task(name="dl.step")
    def step(x: int) -> int:
        return x

    ids = [step.enqueue(i).id for i in range(n)]
    leases = broker.claim(["default"], time.time(), limit=n, worker_id="w")
    assert sorted(lease.id for lease in leases) == sorted(ids)
    return app, sorted(leases, key=lambda lease: lease.id)


def _completed_events(broker: PostgresBroker) -> dict[str, int]:
    seen: dict[str, int] = {}
    for event in broker.events.read(None, 10_000)[0]:
        if event["type"] == "completed":
            seen[event["job_id"]] = seen.get(event["job_id"], 0) + 1
    return seen


def test_a_batch_completion_chosen_as_deadlock_victim_is_retried(
    broker: Any, pg_server: Any
) -> None:
    app, leases = _jobs(broker, 3)
    ids = [lease.id for lease in leases]
    acks = [Ack(lease.id, lease.token, i) for i, lease in enumerate(leases)]
    got = _deadlock(
        pg_server.url, (META, ()), (ROW, (ids,)), lambda: broker.complete(acks, time.time())
    )
    assert got == [True, True, True], got
    assert [broker.get(i).state for i in ids] == [JobState.COMPLETED] * 3
    assert _completed_events(broker) == dict.fromkeys(ids, 1)
    counts = broker.counts()["default"]
    assert (counts["completed"], counts["active"]) == (3, 0)
    app.close()


@pytest.mark.parametrize("op", ["fail", "release", "cancel_running"])
def test_a_lease_holders_write_chosen_as_deadlock_victim_is_retried(
    broker: Any, pg_server: Any, op: str
) -> None:
    app, [lease] = _jobs(broker, 1)
    calls: dict[str, Callable[[], Any]] = {
        "fail": lambda: broker.fail(
            lease.id, lease.token, time.time(), error={"message": "x"}, retry_at=None
        ),
        "release": lambda: broker.release(lease.id, lease.token, time.time()),
        "cancel_running": lambda: broker.cancel_running(lease.id, lease.token, time.time()),
    }
    want = {"fail": "dead_letter", "release": "pending", "cancel_running": "cancelled"}[op]
    got = _deadlock(pg_server.url, (META, ()), (ROW, ([lease.id],)), calls[op])
    assert got == JobState(want), got
    assert broker.get(lease.id).state is JobState(want)
    assert broker.counts()["default"][want] == 1
    app.close()


def test_a_purge_chosen_as_deadlock_victim_is_retried(broker: Any, pg_server: Any) -> None:
    """An operator's purge deletes the rows, then waits for the ``counts`` row the other
    transaction holds; that one asks for a deleted row: the purge is the victim, runs again."""
    app, [lease] = _jobs(broker, 1)
    broker.fail(lease.id, lease.token, time.time(), error={"message": "x"}, retry_at=None)
    got = _deadlock(
        pg_server.url,
        (
            "SELECT 1 FROM conveyor.counts WHERE queue = 'default' AND state = 'dead_letter'"
            " FOR UPDATE",
            (),
        ),
        (ROW, ([lease.id],)),
        lambda: broker.purge(time.time()),
    )
    assert got == 1, got
    assert broker.get(lease.id) is None
    assert broker.counts()["default"]["dead_letter"] == 0
    app.close()


def test_a_lease_extension_chosen_as_deadlock_victim_is_retried(
    broker: Any, pg_server: Any
) -> None:
    """``extend`` locks its rows in the order given: here the opposite of the other's."""
    app, leases = _jobs(broker, 2)
    ids = [lease.id for lease in leases]
    pairs = [(lease.id, lease.token) for lease in leases]
    until = time.time() + 500
    got = _deadlock(
        pg_server.url,
        ("SELECT 1 FROM conveyor.jobs WHERE id = %s FOR UPDATE", (ids[1],)),
        ("SELECT 1 FROM conveyor.jobs WHERE id = %s FOR UPDATE", (ids[0],)),
        lambda: broker.extend(pairs, until - 500, 500),
    )
    assert got == [True, True], got
    assert all(abs(broker.get(i).lease_expires_at - until) < 5 for i in ids)
    app.close()


def test_a_claim_chosen_as_deadlock_victim_is_retried(broker: Any, pg_server: Any) -> None:
    app = Conveyor(broker)

    @app.task(name="dl.step")
    def step(x: int) -> int:
        return x

    ids = [step.enqueue(i).id for i in range(2)]
    got = _deadlock(
        pg_server.url,
        (META, ()),
        (ROW, (ids,)),
        lambda: broker.claim(["default"], time.time(), limit=2, worker_id="w"),
    )
    assert not isinstance(got, Exception), got
    more = broker.claim(["default"], time.time(), limit=2, worker_id="w")
    assert sorted(lease.id for lease in [*got, *more]) == sorted(ids)  # each exactly once
    assert broker.counts()["default"]["active"] == 2
    app.close()


def test_retries_are_bounded_and_jittered_by_the_injected_random_source() -> None:
    pauses: list[float] = []
    retry = Retry(random.Random(3), sleep=pauses.append, attempts=4)
    calls = []

    class Victim:
        def __init__(self) -> None:
            self.retry = retry

        @retry_transient
        def write(self) -> None:
            calls.append(1)
            raise BrokerUnavailable("x") from psycopg.errors.DeadlockDetected("deadlock")

    with pytest.raises(BrokerUnavailable):
        Victim().write()
    assert len(calls) == 4 and len(pauses) == 3
    assert all(0 <= p <= 0.25 for p in pauses)
    assert len(set(pauses)) == 3  # jittered, not a fixed step


def test_other_errors_are_not_retried() -> None:
    calls = []

    class Down:
        retry = Retry(random.Random(1), sleep=lambda s: None)

        @retry_transient
        def write(self) -> None:
            calls.append(1)
            raise BrokerUnavailable("x") from psycopg.OperationalError("server closed")

    with pytest.raises(BrokerUnavailable):
        Down().write()
    assert calls == [1]


def test_a_worker_batch_completion_deadlock_is_quiet_and_exactly_once(
    pg_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A real worker: its recorder's batch completion waits for the other transaction (which
    holds the events counter row), then that transaction asks for the batch's job rows. The
    victim is retried by the broker: every job completed once, no job lost, and nothing
    logged as an outage or with a traceback."""
    broker = PostgresBroker.from_url(pg_server.url)
    broker.flush_all()
    app = Conveyor(broker)
    go = threading.Event()
    ran: list[int] = []

    @app.task(name="dl.work")
    def work(x: int) -> int:
        go.wait(60)
        ran.append(x)
        return x

    n = 6
    ids = [work.enqueue(i).id for i in range(n)]
    worker = app.worker(concurrency=n)
    thread = threading.Thread(target=worker.run)
    caplog.set_level(logging.INFO, logger="conveyor")
    thread.start()
    deadline = time.monotonic() + 60
    while broker.counts()["default"]["active"] < n:  # all claimed and running
        assert time.monotonic() < deadline
        time.sleep(0.01)
    other = psycopg.connect(pg_server.url)
    other.execute("SET deadlock_timeout = '10s'")
    other.execute(META)
    go.set()
    while not any("events_pending" in q for q in _waiting(pg_server.url, other.info.backend_pid)):
        assert time.monotonic() < deadline, "the completion never waited"
        time.sleep(0.01)
    other.execute(ROW, (ids,))  # the completion holds some of them: a deadlock
    other.commit()
    other.close()
    while broker.counts()["default"]["completed"] < n:
        assert time.monotonic() < deadline, broker.counts()
        time.sleep(0.02)
    worker.stop(10)
    thread.join(30)
    assert sorted(ran) == list(range(n))
    assert _completed_events(broker) == dict.fromkeys(ids, 1)
    counts = broker.counts()["default"]
    assert (counts["completed"], counts["active"], counts["pending"]) == (n, 0, 0)
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("deadlock" in r.getMessage() for r in caplog.records)  # said once, at INFO
    app.close()


def test_a_completion_refused_a_lock_by_lock_timeout_is_retried(pg_server: Any) -> None:
    """An operator's ``lock_timeout`` (here 300 ms, on the broker's URL) cuts a completion's
    wait for a row another transaction holds for 600 ms: the completion runs again and lands."""
    from urllib.parse import quote

    url = pg_server.url + ("&" if "?" in pg_server.url else "?")
    broker = PostgresBroker.from_url(url + "options=" + quote("-clock_timeout=300"))
    broker.flush_all()
    broker.retry = Retry(random.Random(5))
    app, [lease] = _jobs(broker, 1)
    other = psycopg.connect(pg_server.url)
    other.execute(ROW, ([lease.id],))
    timer = threading.Timer(0.6, other.commit)
    timer.start()
    t0 = time.monotonic()
    assert broker.complete([Ack(lease.id, lease.token, 1)], time.time()) == [True]
    assert time.monotonic() - t0 >= 0.3  # it did wait past one lock_timeout
    timer.join()
    other.close()
    assert broker.get(lease.id).state is JobState.COMPLETED
    app.close()
    broker.close()


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (psycopg.errors.DeadlockDetected, True),
        (psycopg.errors.SerializationFailure, True),
        (psycopg.errors.LockNotAvailable, True),
        (psycopg.errors.QueryCanceled, False),
        (psycopg.errors.AdminShutdown, False),
    ],
)
def test_which_errors_are_retried(error: type[Exception], retried: bool) -> None:
    calls = []

    class Broker:
        retry = Retry(random.Random(1), sleep=lambda s: None, attempts=2)

        @retry_transient
        def write(self) -> str:
            calls.append(1)
            if len(calls) == 1:
                raise BrokerUnavailable("x") from error("lost a conflict")
            return "done"

    if retried:
        assert Broker().write() == "done"
    else:
        with pytest.raises(BrokerUnavailable):
            Broker().write()
    assert len(calls) == (2 if retried else 1)


def test_a_lock_conflict_does_not_check_every_pooled_connection(
    broker: PostgresBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pool.check()`` (a round trip per idle connection) is for a lost server; a deadlock
    victim's connection is healthy, so mapping its error must not run it."""
    pool = broker.pool()
    checks: list[int] = []
    monkeypatch.setattr(pool, "check", lambda: checks.append(1))
    broker._failed(psycopg.errors.DeadlockDetected("deadlock detected"))
    assert checks == []
    broker._failed(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert checks == [1]
