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
