"""An ``asyncio.CancelledError`` raised by a job's OWN code is an ordinary failure.

Such an error comes from the handler awaiting a future or task that something else cancelled
(an HTTP client's pool closing, a ``TaskGroup`` sibling, ``raise`` by hand): no operator asked
to cancel the job, its deadline did not pass, the worker is not stopping. It was classified as
outside ``retry_on`` (``CancelledError`` is a ``BaseException``) and dead-lettered at the first
attempt as ``permanent``. Now it is kind ``error``, retried under the task's policy, on every
executor and inline. Real cancellations keep their outcome (guards below): an operator's cancel
ends ``cancelled``, a timeout ``timeout``, a worker shutdown releases the job uncharged.
"""

from __future__ import annotations

import asyncio
import threading

from conveyor import Backoff, Conveyor, JobState
from tests.worker.apps import funcs
from tests.worker.conftest import running, wait_until

FAST_RETRY = Backoff.fixed(0.05, jitter=0)


def _assert_retried_then_dead(job: object) -> None:
    j = job.refresh()  # type: ignore[attr-defined]
    assert j.state is JobState.DEAD_LETTER
    assert j.attempts == 2, "retried once: not a permanent failure"
    assert [e["kind"] for e in j.errors] == ["error", "error"]
    assert j.errors[-1]["type"] == "CancelledError"


def test_a_cancelled_error_from_the_jobs_own_code_is_retried(live_app: Conveyor) -> None:
    app = live_app

    @app.task(max_attempts=2, backoff=FAST_RETRY)
    async def awaits_a_cancelled_task() -> None:
        inner = asyncio.ensure_future(asyncio.sleep(30))
        inner.cancel()  # e.g. a client library cancelled its own request
        await inner

    @app.task(max_attempts=2, backoff=FAST_RETRY)
    async def raises_it() -> None:
        raise asyncio.CancelledError()

    @app.task(max_attempts=2, backoff=FAST_RETRY, executor="thread")
    async def in_a_thread() -> None:
        raise asyncio.CancelledError()

    own = app.task(max_attempts=2, backoff=FAST_RETRY, executor="process", name="own_c")(
        funcs.own_cancelled
    )

    @app.task
    async def fine() -> int:
        return 1

    with running(app, concurrency=4, process_pool_size=1) as worker:
        jobs = [
            awaits_a_cancelled_task.enqueue(),
            raises_it.enqueue(),
            in_a_thread.enqueue(),
            own.enqueue(),
        ]
        wait_until(lambda: all(j.refresh().state is JobState.DEAD_LETTER for j in jobs), 20)
        good = fine.enqueue()
        wait_until(lambda: good.refresh().state is JobState.COMPLETED, 10)
        assert not worker.draining and worker.exit_code == 0
    for job in jobs:
        _assert_retried_then_dead(job)


def test_inline_a_cancelled_error_from_the_jobs_own_code_is_retried(app: Conveyor) -> None:
    @app.task(max_attempts=2, backoff=Backoff.fixed(0, jitter=0))
    async def raises_it() -> None:
        raise asyncio.CancelledError()

    job = raises_it.enqueue()
    app.worker().run_until_idle()
    _assert_retried_then_dead(job)


def test_an_operator_cancel_of_an_async_job_still_ends_cancelled(live_app: Conveyor) -> None:
    """Guard: the cancelled asyncio task raises CancelledError too; it is not retried."""
    app = live_app
    started = threading.Event()

    @app.task(max_attempts=5)
    async def nap() -> None:
        started.set()
        await asyncio.sleep(30)

    job = nap.enqueue()
    with running(app, concurrency=1):
        assert started.wait(5)
        app.cancel(job.id)
        wait_until(lambda: job.refresh().state is JobState.CANCELLED, 10)
    assert job.refresh().attempts == 1


def test_a_timeout_of_an_async_job_is_still_a_timeout(live_app: Conveyor) -> None:
    """Guard: the deadline cancels the asyncio task; recorded as ``timeout``."""
    app = live_app

    @app.task(timeout=0.3, max_attempts=1)
    async def nap() -> None:
        await asyncio.sleep(30)

    job = nap.enqueue()
    with running(app):
        wait_until(lambda: job.refresh().state is JobState.DEAD_LETTER, 10)
    assert [e["kind"] for e in job.refresh().errors] == ["timeout"]


def test_a_shutdown_still_releases_an_async_job_uncharged(live_app: Conveyor) -> None:
    """Guard: stopping the worker cancels the asyncio task; the job goes back to pending."""
    app = live_app
    started = threading.Event()

    @app.task(max_attempts=1)
    async def nap() -> None:
        started.set()
        await asyncio.sleep(30)

    job = nap.enqueue()
    with running(app, shutdown_timeout=0.3):
        assert started.wait(5)
    j = job.refresh()
    assert j.state is JobState.PENDING
    assert not [e for e in j.errors if e.get("kind") in ("permanent", "error")]
