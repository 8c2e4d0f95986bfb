"""``Running``: what the worker knows about one in-flight job, shared by its threads.

A ``Running`` is created when a lease is claimed and dropped once its outcome is written. The
executors, the lease keeper, the timeout watchdog and the shutdown path all touch it, so every
decision that must happen once (the outcome, a timeout interruption) goes through its lock:
``settle()`` returns True to exactly one caller, and later outcomes are discarded.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..broker.base import Lease
    from ..core.job import Job
    from ..task import Task

QUEUED, RUNNING, LEFT = "queued", "running", "left"


@dataclass(eq=False, slots=True)
class Running:
    """One claimed job: lease, task, executor, timing and the flags its helpers set."""

    lease: Lease
    task: Task | None
    executor: str  # "thread" | "asyncio" | "process" | "none" (rejected before running)
    timeout: float | None
    claimed: float = field(default_factory=time.monotonic)
    started: float | None = None  # monotonic time the job really began
    deadline: float | None = None  # monotonic; None when the job has no timeout
    phase: str = QUEUED
    interrupted: bool = False  # the timeout fired and the executor was told to stop it
    stuck: bool = False  # it ignored the interruption past the grace period
    lost: bool = False  # the broker said the lease is gone; outcome will be discarded
    lost_announced: bool = False  # the lease-lost warning and hook happened
    settled: bool = False  # an outcome (or a release) was decided; later ones are ignored
    thread_ident: int | None = None
    handle: Any = None  # executor-specific (asyncio task, process slot)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def job(self) -> Job:
        """The job snapshot taken when it was claimed."""
        return self.lease.job

    @property
    def token(self) -> str:
        """The fencing token of this attempt."""
        return self.lease.token

    def begin(self, thread_ident: int | None = None) -> None:
        """Mark the start of execution; the timeout clock starts now."""
        with self.lock:
            self.started = time.monotonic()
            if self.timeout is not None:
                self.deadline = self.started + self.timeout
            self.thread_ident = thread_ident
            self.phase = RUNNING

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


def effective_timeout(task: Task | None, job: Job) -> float | None:
    """The job's own timeout, else its task's; None or 0 means no limit."""
    value = job.timeout if job.timeout is not None else (task.timeout if task else None)
    return float(value) if value else None


def choose_executor(task: Task) -> str:
    """Where a task runs: asyncio for ``async def``, a child process, or the thread pool."""
    if task.executor == "process":
        return "process"
    if task.is_async and task.executor in ("auto", "asyncio"):
        return "asyncio"
    return "thread"
