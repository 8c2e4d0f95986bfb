"""Issue 19 items 2 and 3: ``handle.wait()`` / ``wait_async()`` on every backend.

``wait`` returns the job's result, raises ``JobFailed`` (with the job's error) for a dead letter,
a cancelled job or a result that could not be stored, and ``WaitTimeout`` (a ``TimeoutError``)
when time runs out. It wakes on the backend's own signal, not a fixed sleep: the tests measure
how soon after a job finishes its waiter returns.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from conveyor import Conveyor, JobFailed, JobState, PermanentError, WaitTimeout
from tests.worker.conftest import running


def _tasks(app: Conveyor) -> dict[str, Any]:
    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    @app.task
    def slow(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @app.task(max_attempts=1)
    def broken(why: str) -> None:
        raise PermanentError(why)

    @app.task
    def unstorable() -> object:
        return object()

    return {"add": add, "slow": slow, "broken": broken, "unstorable": unstorable}


def test_wait_returns_the_result(live_app: Conveyor) -> None:
    t = _tasks(live_app)
    with running(live_app, concurrency=2):
        assert t["add"].enqueue(2, 3).wait(timeout=30) == 5
        handle = t["add"].enqueue(1, 1)
        assert handle.wait(timeout=30) == 2
        assert handle.state is JobState.COMPLETED  # the handle was refreshed in place


def test_wait_wakes_soon_after_the_job_finishes(live_app: Conveyor) -> None:
    """Not a fixed sleep: memory wakes on a condition, Redis on the queue's event stream,
    SQLite polls data_version with a backoff capped at 50 ms."""
    t = _tasks(live_app)
    with running(live_app):
        handle = t["slow"].enqueue(1.2)
        assert handle.wait(timeout=30) == 1.2
        returned = time.time()  # live_app runs on the real clock
        assert handle.finished_at is not None
        assert returned - handle.finished_at < 0.3


def test_wait_raises_the_failure_of_a_dead_letter(live_app: Conveyor) -> None:
    t = _tasks(live_app)
    with running(live_app):
        handle = t["broken"].enqueue("card declined")
        with pytest.raises(JobFailed) as info:
            handle.wait(timeout=30)
    assert info.value.state == "dead_letter"
    assert info.value.error is not None and info.value.error["message"] == "card declined"
    assert "card declined" in str(info.value) and handle.id in str(info.value)


def test_wait_raises_for_a_cancelled_job(live_app: Conveyor) -> None:
    t = _tasks(live_app)
    handle = t["add"].enqueue_in(3600, 1, 2)
    threading.Timer(0.2, live_app.cancel, args=[handle.id]).start()
    with pytest.raises(JobFailed) as info:
        handle.wait(timeout=30)
    assert info.value.state == "cancelled"


def test_wait_raises_when_the_result_could_not_be_stored(live_app: Conveyor) -> None:
    t = _tasks(live_app)
    with running(live_app), pytest.raises(JobFailed, match="without its result"):
        t["unstorable"].enqueue().wait(timeout=30)


def test_wait_times_out(live_app: Conveyor) -> None:
    t = _tasks(live_app)
    handle = t["add"].enqueue(1, 2)  # no worker runs
    began = time.monotonic()
    with pytest.raises(WaitTimeout) as info:
        handle.wait(timeout=0.3)
    elapsed = time.monotonic() - began
    assert isinstance(info.value, TimeoutError)
    assert info.value.state == "pending"
    assert 0.3 <= elapsed < 3.0


def test_the_protocol_default_wait_is_a_bounded_backoff() -> None:
    """A broker without a wake-up signal (a third-party backend) waits 5, 10, 20 ... ms, at
    most 200 ms a round and never past the timeout."""
    from conveyor.broker.base import Broker
    from conveyor.broker.memory import MemoryBroker

    broker = MemoryBroker()
    began = time.monotonic()
    cursor: Any = 0
    for _ in range(4):
        cursor = Broker.wait_change(broker, "q", "id", cursor, 10.0)
    elapsed = time.monotonic() - began
    assert cursor == 4 and 0.07 <= elapsed < 1.0
    began = time.monotonic()
    Broker.wait_change(broker, "q", "id", 100, 0.01)
    assert time.monotonic() - began < 0.15
