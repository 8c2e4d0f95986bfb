"""Contract: ``clear_queue`` deletes the waiting jobs of one queue and nothing else.

Pending, scheduled and retry-scheduled jobs of the queue go; running (active) jobs keep their
lease and can still complete; finished jobs and other queues are untouched; counts follow.
"""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.broker.base import Ack
from conveyor.task import JobSpec


def test_clear_deletes_only_waiting_jobs_of_the_queue(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="flaky", max_attempts=3)
    def flaky() -> None:
        raise RuntimeError("again")

    @app.task(name="ok")
    def ok() -> None:
        return None

    done = app.enqueue("ok", queue="mail")
    app.worker(queues=["mail"]).run_until_idle()
    retrying = app.enqueue("flaky", queue="mail")
    app.worker(queues=["mail"]).run_until_idle()
    assert retrying.refresh().state is JobState.RETRY_SCHEDULED
    running = app.enqueue("ok", queue="mail", priority=-5)
    [lease] = app.broker.claim(["mail"], clock.now(), limit=1, visibility_timeout=600)
    assert lease.id == running.id
    pending = [app.enqueue("ok", queue="mail") for _ in range(3)]
    later = app.enqueue("ok", queue="mail", delay=3600)
    other = app.enqueue("ok", queue="other")

    assert app.broker.clear_queue("mail", clock.now()) == 5
    for handle in [*pending, later, retrying]:
        assert app.broker.get(handle.id) is None, handle.id
    assert app.broker.get(running.id).state is JobState.ACTIVE
    assert app.broker.get(done.id).state is JobState.COMPLETED
    assert app.broker.get(other.id).state is JobState.PENDING
    counts = app.broker.counts()["mail"]
    assert counts["pending"] == counts["scheduled"] == counts["retry_scheduled"] == 0
    assert counts["active"] == 1 and counts["completed"] == 1
    assert app.broker.complete([Ack(lease.id, lease.token)], clock.now()) == [True]
    clock.advance(7200)
    assert app.broker.claim(["mail"], clock.now(), limit=10) == []
    assert app.broker.clear_queue("mail", clock.now()) == 0
    assert app.broker.clear_queue("nosuchqueue", clock.now()) == 0


def test_clear_then_new_jobs_run(app: Conveyor, clock: FakeClock) -> None:
    for _ in range(5):
        app.enqueue("t", queue="q")
    assert app.broker.clear_queue("q", clock.now()) == 5
    fresh = app.enqueue("t", queue="q")
    [lease] = app.broker.claim(["q"], clock.now(), limit=5)
    assert lease.id == fresh.id


@pytest.mark.parametrize("n", [1200])
def test_clear_a_large_queue(app: Conveyor, clock: FakeClock, n: int) -> None:
    app.enqueue_many([JobSpec("t", (i,), {}, {"queue": "big"}) for i in range(n)])
    assert app.broker.clear_queue("big", clock.now()) == n
    assert app.broker.counts()["big"]["pending"] == 0
