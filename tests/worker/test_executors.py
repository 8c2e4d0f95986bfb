"""Executors in one worker process: thread pool, one asyncio loop, a warm process pool; slots."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from conveyor import Conveyor, JobState
from tests.worker.apps import funcs
from tests.worker.conftest import running, states, wait_until


def test_each_executor_runs_and_stores_results(live_app: Conveyor) -> None:
    app = live_app

    @app.task
    def plain(x: int) -> list[object]:
        return [x, threading.current_thread().name]

    @app.task
    async def coro(x: int) -> list[object]:
        await asyncio.sleep(0.01)
        return [x, threading.current_thread().name]

    proc = app.task(executor="process", name="proc_pid")(funcs.pid)
    jobs = [plain.enqueue(1), coro.enqueue(2), proc.enqueue()]
    with running(app, concurrency=4):
        wait_until(lambda: states(app, jobs) == ["completed"] * 3)
    assert jobs[0].result[0] == 1 and jobs[0].result[1].startswith("conveyor-job")
    assert jobs[1].result == [2, "conveyor-asyncio"]
    assert isinstance(jobs[2].result, int) and jobs[2].result != os.getpid()


def test_never_claims_more_than_free_slots(live_app: Conveyor) -> None:
    app = live_app
    gate = threading.Event()
    started: list[int] = []

    @app.task
    def hold(i: int) -> None:
        started.append(i)
        gate.wait(10)

    jobs = [hold.enqueue(i) for i in range(5)]
    with running(app, concurrency=3):
        wait_until(lambda: len(started) == 3)
        deadline = time.monotonic() + 0.3  # observe: nothing more is claimed meanwhile
        while time.monotonic() < deadline:
            counts = app.stats()["queues"]["default"]
            assert (counts["active"], counts["pending"]) == (3, 2)
            time.sleep(0.02)
        other = app.dequeue("default")  # the 2 left are claimable by another consumer
        assert other is not None and other.id in {j.id for j in jobs}
        other.nack()
        gate.set()
        wait_until(lambda: states(app, jobs) == ["completed"] * 5)
    assert len(started) == 5


def test_asyncio_runs_hundreds_of_awaits_on_one_thread(live_app: Conveyor) -> None:
    app = live_app
    peak = {"threads": 0, "running": 0, "max_running": 0}
    # threads other tests left winding down (callers, idle writers) are not this worker's
    before = threading.active_count()

    @app.task
    async def nap() -> None:
        peak["running"] += 1
        peak["max_running"] = max(peak["max_running"], peak["running"])
        peak["threads"] = max(peak["threads"], threading.active_count())
        await asyncio.sleep(0.3)
        peak["running"] -= 1

    app.enqueue_many([nap.spec() for _ in range(300)])
    began = time.monotonic()
    with running(app, concurrency=300) as worker:
        wait_until(lambda: worker.processed == 300, timeout=10)
    assert peak["max_running"] >= 250, peak
    assert peak["threads"] - before < 20, (peak, before)
    assert time.monotonic() - began < 5


def test_process_pool_is_warm_and_reused(live_app: Conveyor) -> None:
    app = live_app
    proc = app.task(executor="process", name="proc_pid")(funcs.pid)
    aproc = app.task(executor="process", name="proc_async_pid")(funcs.async_pid)
    jobs = [proc.enqueue() for _ in range(6)] + [aproc.enqueue()]
    with running(app, concurrency=2, process_pool_size=2):
        wait_until(lambda: states(app, jobs) == ["completed"] * 7, timeout=15)
    pids = {j.result for j in jobs}
    assert len(pids) <= 2 and os.getpid() not in pids  # 7 jobs, at most 2 children: reused


def test_process_job_errors_and_crashes_are_recorded(live_app: Conveyor) -> None:
    app = live_app
    boom = app.task(executor="process", name="proc_fail", max_attempts=1)(funcs.fail)
    die = app.task(executor="process", name="proc_die", max_attempts=1)(funcs.die)
    square = app.task(executor="process", name="proc_square")(funcs.square)

    @app.task(executor="process", max_attempts=1)
    def local_fn() -> None:  # not importable by the child: refused with a clear message
        pass

    jobs = [boom.enqueue("bad"), die.enqueue(), local_fn.enqueue(), square.enqueue(7)]
    with running(app, concurrency=2, process_pool_size=1):
        wait_until(
            lambda: all(
                j.refresh().state in (JobState.DEAD_LETTER, JobState.COMPLETED) for j in jobs
            ),
            timeout=15,
        )
    assert jobs[0].last_error == "ValueError: bad"
    assert jobs[1].errors[-1]["type"] == "ChildProcessDied" and "13" in str(jobs[1].last_error)
    assert "module level" in str(jobs[2].last_error)
    assert jobs[3].state is JobState.COMPLETED and jobs[3].result == 49  # pool recovered


def test_thread_executor_grows_only_as_needed(live_app: Conveyor) -> None:
    app = live_app

    @app.task
    def quick() -> None:
        pass

    app.enqueue_many([quick.spec() for _ in range(20)])
    with running(app, concurrency=64) as worker:
        wait_until(lambda: worker.processed == 20)
        threads = [t for t in threading.enumerate() if t.name.startswith("conveyor-job")]
        assert 1 <= len(threads) <= 20
