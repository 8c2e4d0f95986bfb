"""Contract: a job enqueued by name gets its task's own policy; SystemExit is an ordinary error."""

from __future__ import annotations

import random

from conveyor import Conveyor, FakeClock, JobState
from conveyor.broker.base import Broker


def test_job_enqueued_by_name_elsewhere_gets_the_tasks_max_attempts(
    broker: Broker, clock: FakeClock
) -> None:
    producer = Conveyor(broker, clock=clock)  # does not register the task
    handle = producer.enqueue("flaky_by_name")
    worker_app = Conveyor(broker, clock=clock, rng=random.Random(1))

    @worker_app.task(name="flaky_by_name", max_attempts=2)
    def flaky() -> None:
        raise ValueError("down")

    worker = worker_app.worker()
    for _ in range(4):
        worker.run_until_idle()
        clock.advance(3600)
    job = handle.refresh()
    assert job.state is JobState.DEAD_LETTER
    assert job.attempts == 2  # the task's max_attempts, not the default 4


def test_explicit_max_attempts_from_the_producer_still_wins(
    broker: Broker, clock: FakeClock
) -> None:
    producer = Conveyor(broker, clock=clock)
    handle = producer.enqueue("flaky_by_name2", max_attempts=3)
    worker_app = Conveyor(broker, clock=clock, rng=random.Random(1))

    @worker_app.task(name="flaky_by_name2", max_attempts=1)
    def flaky() -> None:
        raise ValueError("down")

    worker = worker_app.worker()
    for _ in range(5):
        worker.run_until_idle()
        clock.advance(3600)
    job = handle.refresh()
    assert (job.state, job.attempts) == (JobState.DEAD_LETTER, 3)


def test_system_exit_in_a_job_is_a_retryable_error(app: Conveyor) -> None:
    @app.task(max_attempts=2)
    def quits() -> None:
        raise SystemExit(3)

    handle = quits.enqueue()
    worker = app.worker()
    assert worker.process_next()  # returns: the SystemExit did not stop the caller
    job = handle.refresh()
    assert job.state is JobState.RETRY_SCHEDULED
    assert job.errors[-1]["kind"] == "error" and job.errors[-1]["type"] == "SystemExit"
