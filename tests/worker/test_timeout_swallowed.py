"""A job that returns normally after its timeout interrupt has finished its work: completed.

``JobTimeout`` is raised inside a thread job at its deadline (an asyncio job's task is
cancelled). A handler that catches it to clean up and returns (Celery's soft time limit,
Dramatiq's ``TimeLimitExceeded``), or that returns before the interruption could land, was
recorded as timed out anyway and retried: its side effects ran again and its result was lost.
Now a job that returns is completed with its result; one that raises (the interruption or its
own error) or ignores it past ``timeout_grace`` is still a timeout (guards below).
"""

from __future__ import annotations

import asyncio
import time

from conveyor import Conveyor, JobState
from conveyor.errors import JobTimeout
from tests.worker.conftest import running, wait_until


def _ended(job: object) -> bool:
    state = job.refresh().state  # type: ignore[attr-defined]
    return state in (JobState.COMPLETED, JobState.DEAD_LETTER, JobState.RETRY_SCHEDULED)


def test_a_job_that_catches_its_timeout_and_returns_is_completed(live_app: Conveyor) -> None:
    app = live_app

    @app.task(timeout=0.3, max_attempts=2)
    def tidy() -> str:
        try:
            for _ in range(500):
                time.sleep(0.01)
        except JobTimeout:
            return "cleaned up"
        return "finished"

    @app.task(timeout=0.3, max_attempts=2)
    async def tidy_async() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "cleaned up"
        return "finished"

    with running(app, concurrency=2):
        jobs = [tidy.enqueue(), tidy_async.enqueue()]
        wait_until(lambda: all(_ended(j) for j in jobs), 10)
    for job in jobs:
        assert job.state is JobState.COMPLETED, job.errors
        assert job.result == "cleaned up" and job.attempts == 1 and job.errors == []


def test_inline_a_job_that_catches_its_timeout_and_returns_is_completed() -> None:
    app = Conveyor("memory://")

    @app.task(timeout=0.2, max_attempts=2)
    def tidy() -> str:
        try:
            for _ in range(300):
                time.sleep(0.01)
        except JobTimeout:
            return "cleaned up"
        return "finished"

    job = tidy.enqueue()
    assert app.worker().process_next()
    job.refresh()
    assert job.state is JobState.COMPLETED and job.result == "cleaned up"


def test_a_job_that_reraises_its_timeout_is_still_a_timeout(live_app: Conveyor) -> None:
    """Guard: raising (the interruption or anything else after it) stays a timeout."""
    app = live_app

    @app.task(timeout=0.3, max_attempts=1)
    def strict() -> None:
        try:
            for _ in range(500):
                time.sleep(0.01)
        except JobTimeout:
            raise ValueError("gave up") from None

    with running(app):
        job = strict.enqueue()
        wait_until(lambda: _ended(job), 10)
    assert job.refresh().errors[-1]["kind"] == "timeout"
