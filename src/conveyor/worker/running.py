"""``Running``: what the worker knows about one in-flight job, shared by its threads.

A ``Running`` is created when a lease is claimed and dropped once its outcome is written. The
executors, the lease keeper, the timeout watchdog and the shutdown path all touch it, so every
decision that must happen once (the outcome, a timeout interruption) goes through its lock:
``settle()`` returns True to exactly one caller, and later outcomes are discarded.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..broker.base import Lease
    from ..core.job import Job
    from ..middleware import Around
    from ..task import Task

QUEUED, RUNNING, LEFT = "queued", "running", "left"


class Running:
    """One claimed job: lease, task, executor, timing and the flags its helpers set."""

    __slots__ = (
        "around",
        "cancel_requested",
        "cancelled_at",
        "claimed",
        "deadline",
        "executor",
        "handle",
        "interrupted",
        "job",
        "lease",
        "lease_until",
        "lock",
        "lost",
        "lost_announced",
        "phase",
        "settled",
        "started",
        "stuck",
        "task",
        "thread_ident",
        "timeout",
        "token",
    )

    def __init__(
        self, lease: Lease, task: Task[..., Any] | None, executor: str, timeout: float | None
    ) -> None:
        self.lease = lease
        self.job: Job = lease.job  # the job snapshot taken when it was claimed
        self.token: str = lease.token  # the fencing token of this attempt
        self.task = task
        self.executor = executor  # "thread" | "asyncio" | "process" | "none" (refused)
        self.timeout = timeout
        self.claimed = time.monotonic()
        # monotonic time the lease runs out, set by the keeper on each extension (None: the
        # claim's lease, see recorder.lease_left); a failing outcome write is retried until then
        self.lease_until: float | None = None
        self.started: float | None = None  # monotonic time the job really began
        self.deadline: float | None = None  # monotonic; None when the job has no timeout
        self.phase = QUEUED
        self.interrupted = False  # the timeout fired (or a cancel came) and the executor was told
        self.cancel_requested = False  # an operator cancelled it while it ran (worker/cancel.py)
        self.cancelled_at: float | None = None  # monotonic time of that request
        self.stuck = False  # it ignored the interruption past the grace period
        self.lost = False  # the broker said the lease is gone; outcome will be discarded
        self.lost_announced = False  # the lease-lost warning and hook happened
        self.settled = False  # an outcome (or a release) was decided; later ones are ignored
        self.thread_ident: int | None = None
        self.handle: Any = None  # executor-specific (asyncio task, process slot)
        self.around: Around | None = None  # the middleware's around_process hooks, if any
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"Running(job={self.job.id!r}, executor={self.executor!r}, "
            f"phase={self.phase!r}, settled={self.settled!r})"
        )

    def begin(self, thread_ident: int | None = None) -> bool:
        """Mark the start of execution; the timeout clock starts now. False (and nothing
        changes) when the attempt was already settled: cancelled before it could start."""
        with self.lock:  # a cancel (any job) or a timeout may interrupt it from now on
            if self.settled:
                return False
            self.started = time.monotonic()
            if self.timeout is not None:
                self.deadline = self.started + self.timeout
            self.thread_ident = thread_ident
            self.phase = RUNNING
            return True

    def settle(self) -> bool:
        """Claim the right to decide this attempt's fate; True for the first caller only."""
        with self.lock:
            if self.settled:
                return False
            self.settled = True
            return True

    def duration(self) -> float:
        """Seconds since the job began (or was claimed, if it never began)."""
        return time.monotonic() - (self.started if self.started is not None else self.claimed)


def effective_timeout(task: Task[..., Any] | None, job: Job) -> float | None:
    """The job's own timeout, else its task's; None or 0 means no limit."""
    value = job.timeout if job.timeout is not None else (task.timeout if task else None)
    return float(value) if value else None


def choose_executor(task: Task[..., Any]) -> str:
    """Where a task runs: asyncio for ``async def``, a child process, or the thread pool."""
    if task.executor == "process":
        return "process"
    if task.is_async and task.executor in ("auto", "asyncio"):
        return "asyncio"
    return "thread"
