"""Producer-side writes and the flow-limit admin actions that lose a lock conflict are run again
inside the broker (``postgres/retry.py``), on a real cluster, as the worker's writes are:
``enqueue`` (one statement, or a transaction with idempotency keys or flow groups), a
workflow's enqueue, ``debounce``'s replacement, ``app.set_limit`` / ``clear_limit``, pause and
resume. A second connection holds a table lock the write needs; the broker's URL sets
``lock_timeout`` to 300 ms, so the write's first attempt fails with 55P03; the retry policy's
sleep (the pause before the retry) releases the other transaction, so the second attempt runs
unopposed: deterministic, no timing. An enqueue on the CALLER's connection is never run again:
the lock conflict reaches the caller, whose transaction goes on (the batch's savepoint)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("psycopg")

import psycopg

from conveyor import Conveyor, FakeClock, JobState, chain
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.broker.postgres.retry import Retry
from conveyor.errors import BrokerUnavailable


class Held:
    """Another transaction holding ``LOCK TABLE <table> IN SHARE MODE`` (no row of it can be
    inserted, updated or deleted meanwhile), released by the retry's pause."""

    def __init__(self, url: str) -> None:
        self.other = psycopg.connect(url)
        self.pauses: list[float] = []

    def lock(self, table: str) -> None:
        self.other.execute(f"LOCK TABLE conveyor.{table} IN SHARE MODE")

    def sleep(self, pause: float) -> None:
        """The retry's pause: the conflict is over, the next attempt runs unopposed."""
        self.pauses.append(pause)
        self.other.rollback()


@pytest.fixture
def held(pg_server: Any) -> Iterator[tuple[PostgresBroker, Held]]:
    """A flushed broker whose sessions give up a lock wait after 300 ms, and ``Held``."""
    url = pg_server.url + ("&" if "?" in pg_server.url else "?")
    broker = PostgresBroker.from_url(url + "options=" + quote("-clock_timeout=300"))
    broker.flush_all()
    h = Held(pg_server.url)
    broker.retry = Retry(random.Random(3), sleep=h.sleep)
    yield broker, h
    h.other.close()
    broker.close()


def _app(broker: PostgresBroker) -> Conveyor:
    app = Conveyor(broker, clock=FakeClock(1_700_000_000.0))

    @app.task(name="p.step")
    def step(*args: int) -> int:
        return args[0]

    @app.task(name="p.fair", fair_by="tenant")
    def fair(tenant: str) -> None: ...

    @app.task(name="p.debounced")
    def debounced(x: int) -> None: ...

    app.enqueue("p.step", (0,))  # the queue exists: a later enqueue only inserts jobs
    return app


def _enqueue_plain(app: Conveyor) -> Callable[[], Any]:
    return lambda: [app.enqueue("p.step", (1,)).id]


def _enqueue_keyed(app: Conveyor) -> Callable[[], Any]:
    return lambda: [app.enqueue("p.step", (2,), idempotency_key="k").id]


def _enqueue_grouped(app: Conveyor) -> Callable[[], Any]:
    return lambda: [app.enqueue("p.fair", ("t1",)).id]


def _enqueue_workflow(app: Conveyor) -> Callable[[], Any]:
    step = app.tasks["p.step"]
    return lambda: list(chain(step.partial(1), step.partial(2)).enqueue().ids)


CASES: dict[str, tuple[str, Callable[[Conveyor], Callable[[], Any]]]] = {
    "enqueue": ("jobs", _enqueue_plain),
    "enqueue_with_key": ("jobs", _enqueue_keyed),
    "enqueue_grouped": ("jobs", _enqueue_grouped),
    "enqueue_workflow": ("jobs", _enqueue_workflow),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_enqueue_refused_a_lock_is_run_again(
    held: tuple[PostgresBroker, Held], case: str
) -> None:
    broker, h = held
    table, make = CASES[case]
    app = _app(broker)
    write = make(app)
    h.lock(table)
    ids = write()  # before: BrokerUnavailable (55P03, not retried)
    assert len(h.pauses) == 1, "one attempt refused, the next one stored the jobs"
    assert all(broker.get(i) is not None for i in ids)
    assert broker.counts()["default"]["pending"] + broker.counts()["default"]["waiting"] >= 2
    app.close()


def test_a_debounce_replacement_refused_a_lock_is_run_again(
    held: tuple[PostgresBroker, Held],
) -> None:
    broker, h = held
    app = _app(broker)
    debounced = app.tasks["p.debounced"].options(debounce=60.0)
    first = debounced.enqueue(1)
    h.lock("jobs")
    again = debounced.enqueue(2)  # replaces the waiting job's arguments
    assert len(h.pauses) == 1
    assert again.id == first.id and broker.get(first.id).args == [2]  # type: ignore[union-attr]
    app.close()


@pytest.mark.parametrize("action", ["set_limit", "clear_limit", "pause", "resume"])
def test_a_flow_limit_or_queue_action_refused_a_lock_is_run_again(
    held: tuple[PostgresBroker, Held], action: str
) -> None:
    broker, h = held
    app = _app(broker)
    app.set_limit("rate:p.step", "5/s")
    app.pause("default")
    calls: dict[str, tuple[str, Callable[[], Any]]] = {
        "set_limit": ("flow_limits", lambda: app.set_limit("rate:p.step", "7/s")),
        "clear_limit": ("flow_limits", lambda: app.set_limit("rate:p.step", None)),
        "pause": ("queues", lambda: app.pause("other")),
        "resume": ("queues", lambda: app.resume("default")),
    }
    table, call = calls[action]
    h.lock(table)
    call()  # before: BrokerUnavailable (55P03) for set/clear_limit
    assert len(h.pauses) == 1
    limits = broker.flow_status(0.0)["limits"]
    want = {
        "set_limit": lambda: limits.get("rate:p.step", [None])[0] == 7.0,
        "clear_limit": lambda: "rate:p.step" not in limits,
        "pause": lambda: "other" in broker.paused_queues(),
        "resume": lambda: "default" not in broker.paused_queues(),
    }
    assert want[action](), (action, limits, broker.paused_queues())
    app.close()


def test_an_enqueue_on_the_callers_connection_is_never_run_again(
    held: tuple[PostgresBroker, Held], conn: Any
) -> None:
    """The caller's transaction is the caller's: the broker cannot run it again. The conflict
    reaches the caller at once (no retry pause), only the batch's savepoint rolled back: the
    caller's own rows stay and the same transaction can enqueue again and commit."""
    broker, h = held
    app = _app(broker)
    conn.execute("SET lock_timeout = 300")
    conn.execute("INSERT INTO orders (id, note) VALUES (1, 'mine')")
    h.lock("jobs")
    with pytest.raises((BrokerUnavailable, psycopg.errors.LockNotAvailable)) as caught:
        app.tasks["p.step"].options(connection=conn).enqueue(5)
    assert "lock" in str(caught.value).lower()
    assert h.pauses == [], "not run again"
    h.other.rollback()
    assert conn.execute("SELECT note FROM orders WHERE id = 1").fetchone() == ("mine",)
    job = app.tasks["p.step"].options(connection=conn).enqueue(6)
    conn.commit()
    assert broker.get(job.id) is not None and broker.get(job.id).state is JobState.PENDING  # type: ignore[union-attr]
    assert [j.args for j in app.search(task="p.step").items if j.args[0] in (5, 6)] == [[6]]
    app.close()


def test_an_enqueue_chosen_as_deadlock_victim_is_run_again(pg_server: Any) -> None:
    """A real deadlock (40P01), as tests/postgres/test_worker_deadlock.py provokes them: the
    other transaction holds the ``meta`` row the enqueue's settle statement needs; once the
    enqueue (its INSERT done) waits for it, the other asks for a lock on ``jobs`` that the
    INSERT's lock excludes. The enqueue waited first, its deadlock check picks it."""
    from tests.postgres.test_worker_deadlock import META, _deadlock

    broker = PostgresBroker.from_url(pg_server.url)
    broker.flush_all()
    broker.retry = Retry(random.Random(7))
    app = _app(broker)
    got = _deadlock(
        pg_server.url,
        (META, ()),
        ("LOCK TABLE conveyor.jobs IN SHARE MODE", ()),
        lambda: app.enqueue("p.step", (3,), idempotency_key="dl").id,
    )
    assert isinstance(got, str), got  # before: BrokerUnavailable (deadlock detected)
    assert broker.get(got) is not None
    assert [j.id for j in app.search(task="p.step").items if j.args == [3]] == [got]
    app.close()
    broker.close()


def test_a_new_queue_registered_for_an_enqueue_on_the_callers_connection_is_run_again(
    held: tuple[PostgresBroker, Held], conn: Any
) -> None:
    """The enqueue's rows go in the caller's transaction, but a new queue name is listed in a
    short transaction of the broker's own (``enqueue.insert_jobs``: it must not wait for the
    caller): that one IS the broker's, so a lock conflict there runs it again instead of
    failing the caller's enqueue. The caller's transaction is untouched and commits the job."""
    broker, h = held
    app = _app(broker)
    conn.execute("INSERT INTO orders (id, note) VALUES (2, 'mine')")
    h.lock("queues")
    job = app.tasks["p.step"].options(connection=conn, queue="fresh").enqueue(7)
    # before: BrokerUnavailable (55P03) from the queue's registration, not retried
    assert len(h.pauses) == 1, "one attempt refused, the next one listed the queue"
    conn.commit()
    assert "fresh" in broker.queues()
    got = broker.get(job.id)
    assert got is not None and got.state is JobState.PENDING and got.queue == "fresh"
    assert conn.execute("SELECT note FROM orders WHERE id = 2").fetchone() == ("mine",)
    app.close()
