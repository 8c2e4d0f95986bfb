"""Timers and retention of the memory broker: due delayed jobs, expired leases, finished-job
TTLs (``promote_due``, ``reap_expired``).

A mixin of ``MemoryBroker`` (``memory.py``), split from it to keep each duty one screen long.
``_promote`` and ``_expire`` also run at the start of every claim, so a due job or an expired
lease is claimable without waiting for the reaper; both pop the time heaps (memtimers.py), never
scan every job. The per-queue caps of finished jobs are applied as each job finishes
(``MemoryBroker._finish``); the TTLs here walk each finished ring from its oldest entry.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from ..config import Retention
from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from .memflow import MemoryFlow
from .memtimers import TimeHeap


class MemoryMaintenance:
    """``promote_due`` and ``reap_expired`` of ``MemoryBroker``, and their steps."""

    retention: Retention
    _lock: threading.RLock
    _jobs: dict[str, Job]
    _delayed: TimeHeap
    _leases: TimeHeap
    _finished: dict[str, deque[str]]
    flow: MemoryFlow
    _emit: Callable[..., None]
    _finish: Callable[[Job], None]
    _unlease: Callable[[Job], None]
    _make_ready: Callable[[Job], None]
    _drop: Callable[[str, JobState], None]

    def promote_due(self, now: float, limit: int = 1000) -> int:
        """Move due delayed jobs to pending."""
        with self._lock:
            return self._promote(now, limit)

    def _promote(self, now: float, limit: int) -> int:
        moved = 0
        for job_id in self._delayed.pop_due(now):
            job = self._jobs[job_id]
            lifecycle.promote(job)
            self._make_ready(job)
            moved += 1
            if moved >= limit:
                break
        return moved

    def reap_expired(self, now: float, *, max_lost: int = 3) -> int:
        """Return expired leases to pending; poison pills to dead letter."""
        with self._lock:
            reaped = self._expire(now, max_lost)
            self._expire_finished(now)
            return reaped

    def _expire(self, now: float, max_lost: int) -> int:
        reaped = 0
        for job_id in self._leases.pop_due(now):
            job = self._jobs[job_id]
            worker = job.worker_id
            lifecycle.expire(job, now, max_lost)
            self._unlease(job)
            self._emit("lease_lost", job, now, worker=worker, lost=job.lost)
            if job.state is JobState.DEAD_LETTER:
                self._emit("dead_lettered", job, now, reason="worker_lost")
                self._finish(job)
                self.flow.done(job, now)
            else:
                self._make_ready(job)
            reaped += 1
        return reaped

    def _expire_finished(self, now: float) -> None:
        ttl = {
            JobState.COMPLETED: self.retention.completed_ttl,
            JobState.CANCELLED: self.retention.cancelled_ttl,
        }
        for key, ring in self._finished.items():
            state = JobState(key.rsplit("|", 1)[1])
            if state not in ttl:
                continue
            while ring:
                job = self._jobs.get(ring[0])
                fresh = job is not None and (job.finished_at or 0) > now - ttl[state]
                if fresh and job is not None and job.state is state:
                    break
                self._drop(ring.popleft(), state)
