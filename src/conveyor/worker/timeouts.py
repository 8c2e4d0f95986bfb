"""Timeouts: the watchdog thread, and raising ``JobTimeout`` inside another thread.

The watchdog sleeps until the nearest deadline of the in-flight jobs. At a job's deadline it asks
the job's executor to interrupt it (thread: ``JobTimeout`` raised in the job's thread; asyncio:
the task is cancelled; process: the child is killed). A job still running ``grace`` seconds later
is *stuck*: its attempt is recorded as a timeout and, for thread and asyncio jobs, the worker
process is recycled (a thread cannot be killed, and a coroutine that ignores cancellation may be
blocking the whole loop).

Raising in a thread uses ``PyThreadState_SetAsyncExc``: the exception arrives at the thread's
next Python bytecode, so a job blocked inside one long C call (``time.sleep(600)``, a socket read
without timeout) only notices when that call returns — hence the grace period and the recycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import JobTimeout
from .running import Running

log = logging.getLogger("conveyor.worker")

_async_exc: tuple[Any, Any] | None = None


def _async_exc_functions() -> tuple[Any, Any]:
    """Two prototypes of ``PyThreadState_SetAsyncExc`` (PYFUNCTYPE: called with the GIL held):
    one passes an exception type, the other NULL, which cancels a pending exception. Built on
    first use: ctypes costs an idle worker ~0.3 MB and is only needed once a job times out."""
    global _async_exc
    if _async_exc is None:
        import ctypes

        api = ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
        _async_exc = (
            ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(api),
            ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(api),
        )
    return _async_exc


def inject_timeout(thread_ident: int, exc_type: type[BaseException] = JobTimeout) -> bool:
    """Schedule ``exc_type`` (``JobTimeout``; ``JobCancelled`` for a cancel) to be raised in
    the thread ``thread_ident``; True if it exists."""
    return bool(_async_exc_functions()[0](thread_ident, exc_type))


def clear_async_exception() -> None:
    """Drop an exception scheduled for the *current* thread that has not been raised yet."""
    _async_exc_functions()[1](threading.get_ident(), None)


def timeout_error(run: Running) -> JobTimeout:
    """The exception recorded for a job that ran past its deadline."""
    return JobTimeout(f"job exceeded its timeout of {run.timeout:g}s")


class Watchdog:
    """A daemon thread that fires ``on_deadline`` and ``on_stuck`` for in-flight jobs."""

    def __init__(
        self,
        snapshot: Callable[[], list[Running]],
        on_deadline: Callable[[Running], None],
        on_stuck: Callable[[Running], None],
        grace: float,
    ) -> None:
        self._snapshot = snapshot
        self._on_deadline = on_deadline
        self._on_stuck = on_stuck
        self.grace = grace
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="conveyor-watchdog", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def poke(self) -> None:
        """A job with a deadline started: recompute the next wake-up."""
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread."""
        self._stop.set()
        self._wake.set()
        self._thread.join(2.0)

    def check(self, now: float) -> float:
        """One pass at monotonic time ``now``; returns when the next pass is due."""
        next_at = now + 1.0
        for run in self._snapshot():
            if run.settled:
                continue
            if run.cancelled_at is not None:  # cancelled by an operator (worker/cancel.py)
                next_at = min(next_at, self._check_cancelled(run, now))
                continue
            if run.timeout is None:
                continue
            if run.deadline is None:  # handed to its executor, not started yet: look again soon
                next_at = min(next_at, now + 0.05)
                continue
            if not run.interrupted:
                if now >= run.deadline:
                    log.warning(
                        "job %s (%s) passed its timeout of %gs: interrupting",
                        run.job.id,
                        run.job.task,
                        run.timeout,
                    )
                    self._call(self._on_deadline, run)
                    next_at = min(next_at, now + self.grace)
                else:
                    next_at = min(next_at, run.deadline)
            elif not run.stuck:
                if now >= run.deadline + self.grace:
                    run.stuck = True
                    self._call(self._on_stuck, run)
                else:
                    next_at = min(next_at, run.deadline + self.grace)
        return next_at

    def _check_cancelled(self, run: Running, now: float) -> float:
        """A cancelled job still running ``grace`` s after it was interrupted is stuck, as
        for a timeout; returns when to look again."""
        assert run.cancelled_at is not None
        if run.stuck:
            return now + 1.0
        if now >= run.cancelled_at + self.grace:
            run.stuck = True
            log.warning("job %s (%s) ignored its cancellation", run.job.id, run.job.task)
            self._call(self._on_stuck, run)
            return now + 1.0
        return run.cancelled_at + self.grace

    def _main(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            next_at = self.check(time.monotonic())
            self._wake.wait(max(0.005, next_at - time.monotonic()))

    @staticmethod
    def _call(fn: Callable[[Running], None], run: Running) -> None:
        try:
            fn(run)
        except Exception:
            log.exception("watchdog: handling job %s failed", run.job.id)
