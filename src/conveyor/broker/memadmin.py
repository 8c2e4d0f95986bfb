"""Operator actions of the memory broker that act on one job by id: ``run_now`` and
``delete_job``.

Split from ``memory.py`` to keep it short. Both run under the broker's lock; the ready and
delayed heaps are lazy (stale entries are skipped when popped), so a job only has to change
state or leave ``_jobs`` here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from .memflow import MemoryFlow

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)


class MemoryJobAdmin:
    """``run_now`` and ``delete_job`` of ``MemoryBroker``."""

    _lock: threading.RLock
    _jobs: dict[str, Job]
    _ready_seq: dict[str, int]
    _tokens: dict[str, str]
    flow: MemoryFlow
    _make_ready: Callable[[Job], None]
    _make_delayed: Callable[[Job], None]

    def run_now(self, job_id: str, now: float) -> bool:
        """A scheduled or retrying job becomes pending now (behind its priority's ready jobs)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state not in _DELAYED:
                return False
            lifecycle.run_now(job, now)
            self._make_ready(job)
            return True

    def replace_waiting(self, job_id: str, job: Job, now: float) -> bool:
        """``debounce`` (issue 15): newest arguments; a scheduled job's delay restarts."""
        with self._lock:
            stored = self._jobs.get(job_id)
            if stored is None or not lifecycle.debounce(stored, job, now):
                return False
            if stored.state is JobState.SCHEDULED:
                self._make_delayed(stored)
            return True

    def delete_job(self, job_id: str, now: float) -> bool:
        """Forget a job that is not running (its heap entries go stale and are skipped)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state is JobState.ACTIVE:
                return False
            del self._jobs[job_id]
            self.flow.dropped(job_id)
            self._ready_seq.pop(job_id, None)
            self._tokens.pop(job_id, None)
            return True
