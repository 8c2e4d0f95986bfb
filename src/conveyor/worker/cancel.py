"""Cancelling a RUNNING job: the request, the worker's job watcher, and the fenced record.

``app.cancel(job_id)`` cancels a waiting job at once (``Broker.cancel``). For an ``active`` job
it stores a *cancel request* (``request``): a document of the side stores (collection
``job_cancel``, named by the job id: ``broker/jobdocs.py``), so it reaches the worker holding
the lease on any host, on every backend.

Each worker runs a ``JobWatcher`` thread. While the worker has jobs in flight it reads the
pending requests every ``WATCH_INTERVAL`` s (ONE ``docs.list`` call, whatever the number of
jobs; nothing while idle) and stops each of its jobs that was asked for:

* async jobs: the asyncio task is cancelled;
* thread jobs: ``JobCancelled`` is raised inside the handler's thread (the mechanism of
  timeouts, ``worker/timeouts.py``) and ``current_job().cancelled`` turns True;
* process-executor jobs: the child process is killed (and replaced);
* a job still waiting for an executor slot is never started.

When the handler stops (by raising, which includes the injected exception and the killed child)
the recorder writes ``Broker.cancel_running`` with the attempt's lease token: ``active`` →
``cancelled`` (fenced: a worker that lost the lease changes nothing), the lease is dropped at
once, the job is never retried, and the request is deleted. A handler that returns normally
despite the request completed its work: it is recorded as ``completed``.

The same thread writes the jobs' throttled progress (``jobctx.JobBoard.flush``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..broker.jobdocs import cancel_requested as requested
from ..broker.jobdocs import forget_cancel as forget
from ..errors import LeaseLost
from .execute import Outcome
from .running import QUEUED

if TYPE_CHECKING:
    from ..broker.side import SideStores
    from ..core.state import JobState
    from .executors import Executor
    from .jobctx import JobBoard
    from .recorder import Recorder
    from .running import Running

log = logging.getLogger("conveyor.worker")

#: the outcome of a job cancelled before it started
CANCELLED = Outcome(False, cancelled=True)
WATCH_INTERVAL = 0.2  # s between two reads of the requests while jobs run: cancel latency


def stop_job(run: Running, executor: Executor | None) -> bool:
    """Mark ``run`` cancelled and interrupt it (``executor.interrupt``, as a timeout does).

    True when the job had not started yet and is now settled without running: the caller
    records it as cancelled at once.
    """
    with run.lock:
        if run.cancel_requested or run.settled:
            return False
        run.cancel_requested = True
        run.cancelled_at = time.monotonic()  # the watchdog's grace counts from here
        queued = run.phase == QUEUED
    log.info("job %s (%s): cancelled by an operator: stopping it", run.job.id, run.job.task)
    if queued and run.settle():
        return True
    if executor is not None:
        executor.interrupt(run)
    return False


def record_cancelled(recorder: Recorder, run: Running, now: float) -> str:
    """Write the cancellation of ``run`` (fenced by its token); the outcome's name."""
    job, broker = run.job, recorder.broker
    note = f"cancelled while running on {recorder.worker_id}"
    try:
        state = recorder._retrying(
            "cancel_running", lambda: _write(recorder, run, now, note), [run]
        )
    except LeaseLost:
        return "lease_lost"
    except Exception:
        log.exception("recording the cancellation of job %s failed", job.id)
        return "lease_lost"
    if state is None:
        return "lease_lost"
    with contextlib.suppress(Exception):  # best effort: the request expires anyway
        forget(broker, job.id)
    return "cancelled"


def _write(recorder: Recorder, run: Running, now: float, note: str) -> JobState:
    job, broker = run.job, recorder.broker
    try:
        return broker.cancel_running(job.id, run.token, now, note=note)
    except NotImplementedError:  # a backend from before issue 16: never retried all the same
        error = {
            "attempt": job.attempts,
            "kind": "permanent",
            "type": "JobCancelled",
            "message": f"{note} ({type(broker).__name__} cannot record 'cancelled')",
            "traceback": "",
            "worker": recorder.worker_id,
            "at": now,
        }
        return broker.fail(job.id, run.token, now, error=error, retry_at=None)


class JobWatcher:
    """A daemon thread: cancel requests for the worker's running jobs, and progress writes."""

    def __init__(
        self,
        side: SideStores,
        now: Callable[[], float],
        running_jobs: Callable[[], list[Running]],
        on_cancel: Callable[[Running], None],
        board: JobBoard,
        interval: float = WATCH_INTERVAL,
    ) -> None:
        self.side = side
        self.now = now
        self.running_jobs = running_jobs
        self.on_cancel = on_cancel
        self.board = board
        self.interval = interval
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._main, name="conveyor-jobwatch", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread."""
        self._stop.set()
        self._thread.join(2.0)

    def check(self, now: float) -> list[Running]:
        """One pass: write due progress, then stop the running jobs asked for; returns them."""
        self.board.flush(now)
        runs = [run for run in self.running_jobs() if not run.settled]
        if not runs:
            return []
        wanted = requested(self.side, {run.job.id for run in runs}, now)
        hit = [run for run in runs if run.job.id in wanted and not run.cancel_requested]
        for run in hit:
            try:
                self.on_cancel(run)
            except Exception:
                log.exception("cancelling job %s failed", run.job.id)
        return hit

    def _main(self) -> None:
        while not self._stop.wait(self.interval):
            began = time.monotonic()
            try:
                self.check(self.now())
                self._failing = False
            except Exception:
                if not self._failing:  # an outage: one line, not one per pass
                    log.warning("reading cancel requests failed", exc_info=True)
                self._failing = True
            spent = time.monotonic() - began
            if spent > self.interval:  # a slow broker: do not add to its load
                self._stop.wait(min(5.0, spent))
