"""A job raising SystemExit is an ordinary failure on every executor; the worker keeps going."""

from __future__ import annotations

import sys

from conveyor import Conveyor, JobState
from tests.worker.conftest import running, wait_until


def test_system_exit_is_retried_and_the_worker_carries_on(live_app: Conveyor) -> None:
    app = live_app

    @app.task(max_attempts=2)
    def quits_in_thread() -> None:
        sys.exit(4)

    @app.task(max_attempts=2)
    async def quits_in_loop() -> None:
        raise SystemExit(5)

    @app.task
    def fine() -> str:
        return "ok"

    with running(app, concurrency=4) as worker:
        bad = [quits_in_thread.enqueue(), quits_in_loop.enqueue()]
        wait_until(lambda: all(j.refresh().state is JobState.DEAD_LETTER for j in bad), 15)
        good = fine.enqueue()
        wait_until(lambda: good.refresh().state is JobState.COMPLETED, 10)
        assert not worker.draining
    for job in bad:
        assert job.attempts == 2  # retried once: not a permanent failure
        assert [e["kind"] for e in job.errors] == ["error", "error"]
        assert job.errors[-1]["type"] == "SystemExit"
