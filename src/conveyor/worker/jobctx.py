"""``current_job()``: what a running handler knows about its job, and its progress reports.

Inside a handler, ``current_job()`` returns a ``JobContext``: ``id``, ``attempt``, ``task``,
``queue``, ``cancelled`` (an operator cancelled this running job: see ``worker/cancel.py``) and
``progress(fraction, message)``.

Progress is stored beside the job (the side store's ``job_progress`` collection, one document
per job id: ``broker/jobdocs.py``) where ``job.progress``, the dashboard's job page and the
/workers page read it. A report never touches the broker on the handler's thread: it only
replaces the job's latest value, and the worker's job watcher (``cancel.JobWatcher``) writes the
latest value of each job at most once per ``PROGRESS_INTERVAL`` seconds (``ProgressThrottle``),
plus once when the job ends, so a tight loop reporting a million times costs a handful of writes.

The worker registers a context for each job it starts (``JobBoard``); ``current_job()`` finds it
through the log job context (``worker/logs.py``), which every executor sets. In a process-pool
child, or a handler called outside a worker with a job context, it returns a *detached* context:
the same fields, ``cancelled`` always False (a cancelled process job is killed) and
``progress()`` ignored.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..broker.jobdocs import read_progress as read_progress  # re-exported
from ..broker.jobdocs import write_progress
from ..errors import ValidationError
from .logs import job_context

if TYPE_CHECKING:
    from ..broker.side import SideStores
    from .running import Running

log = logging.getLogger("conveyor.worker")

PROGRESS_INTERVAL = 0.5  # at most one progress write per job per this many seconds
MAX_MESSAGE = 1000  # characters of a progress message that are kept

#: the jobs running in this process (job id -> its attempt and its worker's board): filled by
#: ``JobBoard.add`` and emptied by ``remove`` (plain dict operations: a few hundred ns per job);
#: a ``JobContext`` is only built when the handler calls ``current_job()``
_active: dict[str, tuple[Running, JobBoard]] = {}


class ProgressThrottle:
    """The latest progress of one job and when it was last written (times are arguments)."""

    __slots__ = ("dirty", "interval", "latest", "written_at")

    def __init__(self, interval: float = PROGRESS_INTERVAL) -> None:
        self.interval = interval
        self.latest: dict[str, Any] | None = None
        self.written_at = -math.inf
        self.dirty = False

    def report(self, value: dict[str, Any]) -> None:
        """Replace the latest value (nothing is written here)."""
        self.latest = value
        self.dirty = True

    def due(self, now: float, *, force: bool = False) -> dict[str, Any] | None:
        """The value to write at ``now`` (then marked written), or None: nothing new, or the
        last write was less than ``interval`` ago (``force``: the job ended, write it now)."""
        if not self.dirty or (not force and now - self.written_at < self.interval):
            return None
        self.dirty = False
        self.written_at = now
        return self.latest


def check_progress(fraction: Any, message: Any) -> tuple[float, str]:
    """``fraction`` as a float in [0, 1] and ``message`` as text, or ValidationError."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ValidationError("fraction", "must be a number from 0 to 1")
    value = float(fraction)
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ValidationError("fraction", "must be a number from 0 to 1")
    if not isinstance(message, str):
        raise ValidationError("message", "must be a string")
    return value, message[:MAX_MESSAGE]


class JobContext:
    """The running job as its handler sees it (``current_job()``)."""

    __slots__ = ("_board", "_run", "attempt", "id", "queue", "task", "throttle")

    def __init__(self, job: Any, run: Running | None, board: JobBoard | None) -> None:
        self.id: str = job.id
        self.attempt: int = int(getattr(job, "attempts", 0))
        self.task: str = job.task
        self.queue: str = getattr(job, "queue", "")
        self._run = run
        self._board = board
        self.throttle = ProgressThrottle(board.interval if board else PROGRESS_INTERVAL)

    def __repr__(self) -> str:
        return f"JobContext(id={self.id!r}, task={self.task!r}, attempt={self.attempt})"

    @property
    def cancelled(self) -> bool:
        """True once an operator cancelled this running job: stop soon (a thread job also
        gets ``JobCancelled`` raised inside it; an async job's task is cancelled)."""
        run = self._run
        return bool(run is not None and run.cancel_requested)

    @property
    def last_progress(self) -> dict[str, Any] | None:
        """The latest ``progress`` reported by this attempt (written or not yet)."""
        return self.throttle.latest

    def progress(self, fraction: float, message: str = "") -> None:
        """Report how far the job is (``fraction`` from 0 to 1) with a short ``message``.

        Cheap and safe in a tight loop: the worker writes the latest value at most once per
        ``PROGRESS_INTERVAL`` s. Raises ValidationError for a fraction outside [0, 1].
        """
        value, text = check_progress(fraction, message)
        board = self._board
        if board is None:  # a detached context (process child): nowhere to report to
            return
        entry = {"fraction": value, "message": text, "attempt": self.attempt, "at": board.now()}
        with board.lock:
            self.throttle.report(entry)


class JobBoard:
    """The contexts of one worker's running jobs, and the progress writes they owe."""

    def __init__(
        self, side: SideStores, now: Callable[[], float], interval: float = PROGRESS_INTERVAL
    ) -> None:
        self.side = side
        self.now = now
        self.interval = interval
        self.lock = threading.Lock()
        self._mine: dict[str, JobContext] = {}

    def add(self, runs: Iterable[Running]) -> None:
        """Jobs about to start: make them findable by ``current_job()``."""
        for run in runs:
            _active[run.job.id] = (run, self)

    def context(self, run: Running) -> JobContext:
        """The context of ``run`` (built on the handler's first ``current_job()`` call)."""
        with self.lock:
            ctx = self._mine.get(run.job.id)
            if ctx is None or ctx._run is not run:
                ctx = self._mine[run.job.id] = JobContext(run.job, run, self)
            return ctx

    def remove(self, runs: Iterable[Running]) -> None:
        """Jobs that ended: write their last progress now and forget them."""
        ended: list[JobContext] = []
        mine = self._mine
        for run in runs:
            key = run.job.id
            entry = _active.get(key)
            if entry is not None and entry[0] is run:
                del _active[key]
            if mine:  # only jobs whose handler called current_job()
                with self.lock:
                    ctx = mine.get(key)
                    if ctx is not None and ctx._run is run:
                        del mine[key]
                        ended.append(ctx)
        if ended:
            self._write(ended, self.now(), force=True)

    def flush(self, now: float) -> int:
        """Write the progress of every job whose throttle allows it at ``now``; how many."""
        with self.lock:
            contexts = list(self._mine.values())
        return self._write(contexts, now, force=False)

    def _write(self, contexts: list[JobContext], now: float, *, force: bool) -> int:
        written = 0
        for ctx in contexts:
            with self.lock:
                value = ctx.throttle.due(now, force=force)
            if value is None:
                continue
            try:
                write_progress(self.side, ctx.id, value, now)
                written += 1
            except Exception:  # progress is best effort: never fail a job over it
                log.warning("storing the progress of job %s failed", ctx.id, exc_info=True)
        return written


def current_job() -> JobContext:
    """The job this handler is running: ``id``, ``attempt``, ``task``, ``queue``,
    ``cancelled`` and ``progress(fraction, message)``.

    Raises RuntimeError outside a job handler.
    """
    job = job_context.get()
    if job is None:
        raise RuntimeError("current_job() is only available inside a job handler")
    entry = _active.get(job.id)
    if entry is not None:
        return entry[1].context(entry[0])
    return JobContext(job, None, None)  # detached: a process child, or a handler called by hand
