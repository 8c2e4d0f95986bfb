"""Timeouts per task and per job, for every executor: stopped within ~timeout (+ grace) and
recorded as kind ``timeout``, then retried or dead-lettered by the policy."""

from __future__ import annotations

import asyncio
import threading
import time

from conveyor import Backoff, Conveyor, JobState
from conveyor.worker.loop import EXIT_STUCK
from tests.worker.apps import funcs
from tests.worker.conftest import running, wait_until


def _finished(job: object) -> bool:
    return job.refresh().state in (JobState.DEAD_LETTER, JobState.RETRY_SCHEDULED)  # type: ignore[attr-defined]


def _assert_timed_out(job: object, began: float, limit: float) -> None:
    elapsed = time.monotonic() - began
    assert elapsed < limit, f"took {elapsed:.2f}s"
    last = job.errors[-1]  # type: ignore[attr-defined]
    assert last["kind"] == "timeout" and last["type"] == "JobTimeout", last
    assert "timeout of 1s" in last["message"]


def test_thread_job_gets_job_timeout_raised_inside_it(live_app: Conveyor) -> None:
    app = live_app
    seen: list[str] = []

    @app.task(timeout=1, max_attempts=1)
    def busy() -> None:
        try:
            for _ in range(500):  # 5 s of Python-level work
                time.sleep(0.01)
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise

    job = busy.enqueue()
    began = time.monotonic()
    with running(app) as worker:
        wait_until(lambda: _finished(job), timeout=4)
        _assert_timed_out(job, began, 2.0)
        assert worker.exit_code == 0
    assert seen == ["JobTimeout"] and job.state is JobState.DEAD_LETTER


def test_async_job_is_cancelled(live_app: Conveyor) -> None:
    app = live_app
    cancelled = threading.Event()

    @app.task(timeout=1, max_attempts=1)
    async def nap() -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = nap.enqueue()
    began = time.monotonic()
    with running(app):
        wait_until(lambda: _finished(job), timeout=4)
        _assert_timed_out(job, began, 2.0)
    assert cancelled.is_set()


def test_process_job_is_killed(live_app: Conveyor) -> None:
    app = live_app
    slow = app.task(executor="process", timeout=1, max_attempts=1, name="p_slow")(
        funcs.sleep_then_pid
    )
    pid = app.task(executor="process", name="p_pid")(funcs.pid)
    with running(app, process_pool_size=1) as worker:
        first = pid.enqueue()  # warm the child so the timing below excludes start-up
        wait_until(lambda: first.refresh().state is JobState.COMPLETED, timeout=10)
        job = slow.enqueue(5)
        began = time.monotonic()
        wait_until(lambda: _finished(job), timeout=4)
        _assert_timed_out(job, began, 2.0)
        after = pid.enqueue()  # the killed child was replaced
        wait_until(lambda: after.refresh().state is JobState.COMPLETED, timeout=10)
        assert after.result != first.result
        assert worker.exit_code == 0


def test_per_job_timeout_and_retry_then_dead_letter(live_app: Conveyor) -> None:
    app = live_app

    @app.task(max_attempts=2, backoff=Backoff.fixed(0))
    def slow(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)

    job = slow.options(timeout=0.3).enqueue(3)
    quick = slow.enqueue(0.5)  # no timeout on this one: finishes
    with running(app, concurrency=2):
        wait_until(lambda: job.refresh().state is JobState.DEAD_LETTER, timeout=5)
        wait_until(lambda: quick.refresh().state is JobState.COMPLETED, timeout=5)
    assert [e["kind"] for e in job.errors] == ["timeout", "timeout"]
    assert job.attempts == 2


def test_thread_ignoring_its_timeout_recycles_the_worker(live_app: Conveyor) -> None:
    app = live_app  # timeout_grace is 0.5 s in these tests
    gate = threading.Event()

    @app.task(timeout=1, max_attempts=3, backoff=Backoff.fixed(0))
    def blocked() -> None:
        gate.wait(5)  # one C call: JobTimeout cannot get in until it returns

    @app.task
    def other() -> None:
        gate.wait(5)

    job, bystander = blocked.enqueue(), other.enqueue()
    began = time.monotonic()
    with running(app, concurrency=2) as worker:
        wait_until(lambda: worker.exit_code == EXIT_STUCK, timeout=4)
        wait_until(lambda: job.refresh().state is JobState.RETRY_SCHEDULED, timeout=2)
        assert time.monotonic() - began < 3.0
        assert job.errors[-1]["kind"] == "timeout"
        wait_until(lambda: bystander.refresh().state is JobState.PENDING, timeout=2)
    gate.set()
    assert worker.returned == EXIT_STUCK  # type: ignore[attr-defined]
    assert bystander.attempts == 0 and bystander.history[-1]["event"] == "released"
