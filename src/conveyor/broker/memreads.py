"""Read-only job queries of the memory broker (get, counts, peek, search, oldest pending) and
the waits (``wait_for_work`` for an idle worker, ``change_cursor`` / ``wait_change`` for a job's
result).

Split from ``memory.py`` to keep it short; the state they read (``_jobs``, ``_ready_seq``,
``_known_queues``) is the broker's, guarded by its lock, and the waits block on its conditions
(``_wake``, notified by new work; ``_ended``, notified by every finishing job).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import orjson

from ..core.job import Job
from ..core.serialization import job_from_dict, job_to_dict
from ..core.state import JobState
from .base import Page, SearchQuery
from .filters import matches


class MemoryReads:
    """The read-only queries of ``MemoryBroker``."""

    _lock: threading.RLock
    _jobs: dict[str, Job]
    _ready_seq: dict[str, int]
    _known_queues: set[str]
    _wake: threading.Condition
    _changes: int  # bumped with every notify of _wake
    _seen: threading.local  # per thread: _changes as of its last claim
    _ended: threading.Condition
    _ends: int  # jobs finished so far

    @staticmethod
    def _snap(job: Job) -> Job:
        # The envelope codec round-trips every allowed value exactly and is far cheaper than
        # copy.deepcopy on a dataclass; snapshots must never alias stored state.
        return job_from_dict(orjson.loads(orjson.dumps(job_to_dict(job))))

    def get(self, job_id: str) -> Job | None:
        """Snapshot or None."""
        with self._lock:
            job = self._jobs.get(job_id)
            return None if job is None else self._snap(job)

    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs per queue per state."""
        with self._lock:
            out = {q: dict.fromkeys(map(str, JobState), 0) for q in self._known_queues}
            for job in self._jobs.values():
                out[job.queue][str(job.state)] += 1
            return out

    def peek(self, queue: str, n: int = 10) -> list[Job]:
        """Next ready jobs in claim order."""
        with self._lock:
            ready = [
                j for j in self._jobs.values() if j.queue == queue and j.state is JobState.PENDING
            ]
            ready.sort(key=lambda j: (j.priority, self._ready_seq.get(j.id, 0)))
            return [self._snap(j) for j in ready[:n]]

    def search(self, query: SearchQuery) -> Page:
        """Filter, sort newest first, paginate."""
        with self._lock:
            hits = [j for j in self._jobs.values() if matches(j, query)]
            hits.sort(key=lambda j: (j.created_at, j.id), reverse=True)
            start = (max(1, query.page) - 1) * query.page_size
            items = [self._snap(j) for j in hits[start : start + query.page_size]]
            return Page(items, len(hits), query.page, query.page_size)

    def oldest_pending(self, queue: str) -> float | None:
        """Ready time of the oldest pending job."""
        with self._lock:
            times = [
                j.run_at or j.created_at
                for j in self._jobs.values()
                if j.queue == queue and j.state is JobState.PENDING
            ]
            return min(times) if times else None

    def wait_for_work(self, queues: Sequence[str], timeout: float, *, due: bool = False) -> None:
        """Wait on the condition that enqueue, delayed jobs and resume notify (exact timeout).

        A notify since this thread's last claim (while it was not waiting yet) ends the wait
        at once: it would otherwise be lost.
        """
        with self._wake:
            if getattr(self._seen, "changes", self._changes) == self._changes:
                self._wake.wait(timeout)
            self._seen.changes = self._changes

    def change_cursor(self, queue: str) -> int:
        """How many jobs have finished so far."""
        return self._ends

    def wait_change(self, queue: str, job_id: str, cursor: Any, timeout: float) -> int:
        """Wait on the condition every finishing job notifies (no polling)."""
        with self._ended:
            if self._ends == cursor:
                self._ended.wait(timeout)
            return self._ends
