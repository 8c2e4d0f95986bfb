"""``worker.process_next()`` (the inline executor) enforces timeouts as the thread executor does."""

from __future__ import annotations

import threading
import time

from conveyor import Conveyor, JobState
from conveyor.config import Settings
from conveyor.worker.loop import EXIT_OK, EXIT_STUCK


def test_process_next_interrupts_a_job_past_its_timeout(tmp_path: object) -> None:
    app = Conveyor("memory://")

    @app.task(timeout=0.2, max_attempts=1)
    def slow() -> str:
        for _ in range(600):  # 6 s of Python-level work: JobTimeout lands at ~0.2 s
            time.sleep(0.01)
        return "finished"

    job = slow.enqueue()
    worker = app.worker()
    began = time.monotonic()
    assert worker.process_next()
    elapsed = time.monotonic() - began
    job.refresh()
    assert job.state is JobState.DEAD_LETTER and job.result is None
    assert job.errors[-1]["kind"] == "timeout" and job.errors[-1]["type"] == "JobTimeout"
    assert elapsed < 3.0, f"took {elapsed:.2f}s"  # interrupted, not the job's 6 s (load: slack)
    assert worker.exit_code == EXIT_OK


def test_process_next_gives_up_on_a_stuck_job_and_flags_the_worker() -> None:
    app = Conveyor("memory://", settings=Settings(timeout_grace=0.2))

    returned = threading.Event()

    @app.task(timeout=0.2, max_attempts=2)
    def blocked() -> str:
        try:
            time.sleep(4.0)  # one C call: the interruption cannot land before it returns
        finally:
            returned.set()
        return "finished"

    job = blocked.enqueue()
    worker = app.worker()
    began = time.monotonic()
    assert worker.process_next()
    elapsed = time.monotonic() - began
    job.refresh()
    assert job.state is JobState.RETRY_SCHEDULED
    assert job.errors[-1]["kind"] == "timeout"
    # timeout + grace (0.4 s), not the job's 4 s (the slack is for a loaded machine)
    assert elapsed < 2.5, f"took {elapsed:.2f}s"
    assert worker.exit_code == EXIT_STUCK  # as the thread executor: this process should recycle
    assert returned.wait(30)  # the abandoned thread finishes; its late result is discarded
    time.sleep(0.2)  # (a negative check: a late write would land now)
    assert job.refresh().state is JobState.RETRY_SCHEDULED and job.result is None
