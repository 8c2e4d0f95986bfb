"""A workflow node released by its parent's completion while an operator cancels it, in two
real PostgreSQL transactions at once: neither side ever sees an error (a deadlock victim would
surface as ``BrokerUnavailable``), and the node ends either cancelled or released, never half."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("psycopg")

from conveyor import Conveyor, JobState, chain, group
from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker

ROUNDS = 40


def _race(first: Any, second: Any) -> list[BaseException]:
    """Run both callables at once (a barrier) on two threads; the errors they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(fn: Any) -> None:
        barrier.wait()
        try:
            fn()
        except BaseException as exc:  # collected and reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in (first, second)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        assert not t.is_alive(), "a racing transaction hung"
    return errors


def test_release_racing_a_cancel_of_the_same_node_never_errs(pg_server: Any) -> None:
    broker = PostgresBroker.from_url(pg_server.url)
    broker.flush_all()
    app = Conveyor(broker)

    @app.task(name="wf.step")
    def step(x: int = 0) -> int:
        return x + 1

    for _ in range(ROUNDS):
        flow = chain(step.partial(1), step.partial(), step.partial()).enqueue()
        first, node, last = flow.jobs()
        [lease] = broker.claim(["default"], time.time(), limit=1, worker_id="w")
        assert lease.id == first.id

        def complete(lease: Any = lease) -> None:
            broker.complete([Ack(lease.id, lease.token, 2)], time.time())

        def cancel(node_id: str = node.id) -> None:
            broker.cancel(node_id, time.time())

        errors = _race(complete, cancel)
        assert errors == [], errors
        state = broker.get(node.id).state  # type: ignore[union-attr]
        assert state in (JobState.CANCELLED, JobState.PENDING), state
        after = broker.get(last.id).state  # type: ignore[union-attr]
        want = JobState.CANCELLED if state is JobState.CANCELLED else JobState.WAITING
        assert after is want, (state, after)
        broker.flush_all()
    app.close()


def test_release_racing_a_workflow_cancel_never_errs(pg_server: Any) -> None:
    """The same with ``cancel_workflow`` (every node not started, in one transaction) and a
    fan-out: the completing parent releases three children the cancel is locking."""
    broker = PostgresBroker.from_url(pg_server.url)
    broker.flush_all()
    app = Conveyor(broker)

    @app.task(name="wf.step")
    def step(x: int = 0) -> int:
        return x + 1

    for _ in range(ROUNDS):
        flow = chain(
            step.partial(1), group(step.partial(), step.partial(), step.partial()), step.partial()
        ).enqueue()
        [lease] = broker.claim(["default"], time.time(), limit=1, worker_id="w")

        def complete(lease: Any = lease) -> None:
            broker.complete([Ack(lease.id, lease.token, 2)], time.time())

        def cancel(workflow_id: str = flow.id) -> None:
            broker.cancel_workflow(workflow_id, time.time())

        errors = _race(complete, cancel)
        assert errors == [], errors
        states = [j.state for j in flow.jobs()]
        assert states[0] is JobState.COMPLETED
        assert all(s in (JobState.CANCELLED, JobState.PENDING) for s in states[1:4]), states
        broker.flush_all()
    app.close()


def _blocked(url: str, pid: int) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> %s", (pid,)
        ).fetchone()
    return bool(row and row[0])


def test_an_operator_action_chosen_as_deadlock_victim_is_retried(pg_server: Any) -> None:
    """Whatever another transaction does, the operator never sees a deadlock: a transaction
    holding the workflow's last node and then asking for its first one (the opposite order)
    makes PostgreSQL pick ``cancel_workflow`` as the victim (it waited first, so its deadlock
    check runs first); it is run again once and succeeds."""
    import psycopg

    broker = PostgresBroker.from_url(pg_server.url)
    broker.flush_all()
    app = Conveyor(broker)

    @app.task(name="wf.step")
    def step(x: int = 0) -> int:
        return x + 1

    flow = chain(step.partial(1), group(step.partial(), step.partial())).enqueue()
    ids = sorted(j.id for j in flow.jobs())
    other = psycopg.connect(pg_server.url)
    pid = other.info.backend_pid
    other.execute("SELECT 1 FROM conveyor.jobs WHERE id = %s FOR UPDATE", (ids[-1],))
    result: list[Any] = []

    def cancel() -> None:
        try:
            result.append(broker.cancel_workflow(flow.id, time.time()))
        except Exception as exc:  # collected: the assertion names it
            result.append(exc)

    thread = threading.Thread(target=cancel)
    thread.start()
    deadline = time.monotonic() + 60
    while not _blocked(pg_server.url, pid):  # it holds the first ids, waits for the last
        assert time.monotonic() < deadline, "cancel_workflow never waited"
        time.sleep(0.01)
    other.execute("SELECT 1 FROM conveyor.jobs WHERE id = %s FOR UPDATE", (ids[0],))
    other.commit()  # reached once the victim rolled back; then the retry goes through
    thread.join(60)
    assert not thread.is_alive()
    other.close()
    assert result == [3], result
    assert all(j.state is JobState.CANCELLED for j in flow.jobs())
    app.close()
