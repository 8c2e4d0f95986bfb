"""Issue 19: middleware that runs AROUND the handler, on the handler's own thread.

``before_process``/``after_process`` run on the claim and recorder threads, so a span or a
context variable set there is invisible to the handler. ``Middleware.around_process`` returns a
context manager the executors enter on the thread that runs the handler (thread executor, the
job's asyncio task, inline, a process-pool child), with the handler's exception on exit.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState, Middleware
from conveyor.config import Settings
from conveyor.core.job import Job
from conveyor.middleware import WorkerView
from tests.worker.apps.around import SEEN, Probe, probe
from tests.worker.conftest import FAST, running, wait_until


class Recorder(Probe):
    """``Probe`` that also records what the handler raised."""

    def __init__(self) -> None:
        self.errors: list[BaseException | None] = []

    @contextmanager
    def around_process(self, worker: WorkerView, job: Job) -> Iterator[None]:
        """Set ``SEEN``; record the handler's exception (and try to swallow it)."""
        with super().around_process(worker, job):
            try:
                yield
            except Exception as exc:
                self.errors.append(exc)
                return  # swallowing is ignored: the job still fails
            self.errors.append(None)


def make_app(tmp_path: Path, *middleware: Middleware) -> Conveyor:
    return Conveyor(
        f"sqlite:///{tmp_path / 'jobs.db'}",
        settings=Settings(**FAST),  # type: ignore[arg-type]
        rng=random.Random(1),
        middleware=list(middleware),
    )


@pytest.mark.parametrize("kind", ["thread", "asyncio", "inline", "inline-timeout"])
def test_the_hook_runs_on_the_handlers_thread(kind: str, tmp_path: Path) -> None:
    mw = Recorder()
    app = make_app(tmp_path, mw)
    try:
        if kind == "asyncio":

            @app.task(name="p")
            async def p_async() -> dict[str, Any]:
                await asyncio.sleep(0)
                return probe()

        else:

            @app.task(name="p", timeout=30 if kind == "inline-timeout" else None)
            def p_sync() -> dict[str, Any]:
                return probe()

        jobs = [app.enqueue("p") for _ in range(4)]
        if kind.startswith("inline"):
            assert app.worker().run_until_idle() == 4
            worker_id = None
        else:
            with running(app, concurrency=2) as worker:
                wait_until(lambda: worker.processed == 4, timeout=20)
                worker_id = worker.id
        for job in jobs:
            result = job.refresh().result
            assert result["seen"] is not None, "the handler did not see the hook's context"
            assert result["seen"]["thread"] == result["thread"]
            assert result["seen"]["job"] == job.id
            if worker_id is not None:
                assert result["seen"]["worker"] == worker_id
        assert mw.errors == [None] * 4
        assert SEEN.get() is None  # nothing leaked into this thread
    finally:
        app.close()


def test_the_hook_sees_the_failure_and_cannot_hide_it() -> None:
    mw = Recorder()
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0), middleware=[mw])

    @app.task(max_attempts=1)
    def explode() -> None:
        raise ValueError("boom")

    job = explode.enqueue()
    app.worker().run_until_idle()
    assert [type(e) for e in mw.errors] == [ValueError]
    assert job.refresh().state is JobState.DEAD_LETTER


def test_a_broken_hook_is_skipped_and_the_job_runs(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Middleware):
        def around_process(self, worker: WorkerView, job: Job) -> Any:
            raise RuntimeError("hook bug")

    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0), middleware=[Broken()])

    @app.task
    def fine() -> str:
        return "ok"

    job = fine.enqueue()
    app.worker().run_until_idle()
    assert job.refresh().result == "ok"
    assert "Broken.around_process failed" in caplog.text


@pytest.mark.slow
def test_the_hook_runs_in_the_process_pool_child() -> None:
    from tests.worker.apps.around import app, proc_probe

    job = proc_probe.enqueue()
    with running(app) as worker:
        wait_until(lambda: job.refresh().state is JobState.COMPLETED, timeout=30)
        result = job.refresh().result
        assert result["seen"] is not None
        assert result["seen"]["thread"] == result["thread"] and result["seen"]["job"] == job.id
        assert result["seen"]["worker"] == worker.id


def test_no_around_middleware_no_wrapper(tmp_path: Path) -> None:
    """The hot path: with no middleware implementing the hook, the runs carry no wrapper."""
    from conveyor import default_middleware
    from conveyor.middleware import Around

    app = make_app(tmp_path, Middleware(), *default_middleware())
    try:
        assert Around.of(app.worker(), app.middleware) is None
    finally:
        app.close()
