"""The lease holder's transitions of the memory broker: complete, fail, release,
cancel_running, extend.

A mixin of ``MemoryBroker`` (``memory.py``), split from it to keep each duty one screen long.
Each call runs under the broker's lock, finds the job only while the caller's lease still holds
(``_leased``: active, same fencing token), applies the pure ``core.lifecycle`` function and
files the job where its new state belongs (ready heap, delayed heap, finished ring); a workflow
node's dependants are ended or released in the same step (``flow.done``, memflow.py). Methods
moved here, not wrapped: the per-job cost is the same as when they lived in ``memory.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from ..errors import LeaseLost
from .base import Ack
from .memflow import MemoryFlow
from .memtimers import TimeHeap


class MemoryFinish:
    """``complete``, ``fail``, ``release``, ``cancel_running`` and ``extend`` of
    ``MemoryBroker``."""

    _lock: threading.RLock
    _tokens: dict[str, str]
    _leases: TimeHeap
    flow: MemoryFlow
    _leased: Callable[[str, str], Job]
    _emit: Callable[..., None]
    _finish: Callable[[Job], None]
    _unlease: Callable[[Job], None]
    _place: Callable[[Job], None]
    _make_delayed: Callable[[Job], None]

    def complete(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """Record each success; False for stale tokens."""
        with self._lock:
            out = []
            for ack in acks:
                try:
                    job = self._leased(ack.job_id, ack.token)
                except LeaseLost:
                    out.append(False)
                    continue
                lifecycle.complete(job, now, ack.result, ack.error)
                self._emit("completed", job, now, attempt=job.attempts)
                self._finish(job)
                self.flow.done(job, now)
                out.append(True)
            return out

    def fail(
        self,
        job_id: str,
        token: str,
        now: float,
        *,
        error: Mapping[str, Any],
        retry_at: float | None,
    ) -> JobState:
        """Record a failed attempt; retry later or dead-letter."""
        with self._lock:
            job = self._leased(job_id, token)
            lifecycle.fail(job, now, error, retry_at)
            self._unlease(job)
            self._emit("failed", job, now, attempt=job.attempts, error=job.last_error)
            if retry_at is None:
                self._emit("dead_lettered", job, now, reason=error.get("kind"))
                self._finish(job)
                self.flow.done(job, now)
            else:
                self._emit("retry_scheduled", job, now, run_at=retry_at)
                self._make_delayed(job)
            return job.state

    def release(
        self,
        job_id: str,
        token: str,
        now: float,
        *,
        delay: float = 0.0,
        penalize: bool = True,
        note: str = "released",
    ) -> JobState:
        """Give the job back (now or after ``delay``)."""
        with self._lock:
            job = self._leased(job_id, token)
            lifecycle.release(job, now, delay, penalize, note)
            self._unlease(job)
            self._emit("released", job, now, note=note)
            self._place(job)
            return job.state

    def cancel_running(
        self, job_id: str, token: str, now: float, *, note: str = "cancelled while running"
    ) -> JobState:
        """active → cancelled by the lease holder (fenced)."""
        with self._lock:
            job = self._leased(job_id, token)
            lifecycle.cancel_running(job, now, note)
            self._tokens.pop(job_id, None)
            self._emit("cancelled", job, now, note=note)
            self._finish(job)
            self.flow.done(job, now)
            return job.state

    def extend(
        self, leases: Sequence[tuple[str, str]], now: float, visibility_timeout: float
    ) -> list[bool]:
        """Push lease deadlines."""
        with self._lock:
            out = []
            for job_id, token in leases:
                try:
                    job = self._leased(job_id, token)
                except LeaseLost:
                    out.append(False)
                    continue
                job.lease_expires_at = now + visibility_timeout
                self._leases.push(job.lease_expires_at, job_id)
                out.append(True)
            return out
