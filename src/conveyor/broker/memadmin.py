"""Operator actions of the memory broker: on one job by id (``cancel``, ``requeue``,
``run_now``, ``replace_waiting``, ``delete_job``), on many (``clear_queue``, ``purge``) and on
queues (``pause``, ``resume``, ``paused_queues``, ``queues``).

A mixin of ``MemoryBroker``, split from ``memory.py`` to keep it short. All run under the
broker's lock; the ready and delayed heaps are lazy (stale entries are skipped when popped), so
a job only has to change state or leave ``_jobs`` here. A cancelled workflow node ends or
releases its dependants in the same step (``flow.done``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ..core import lifecycle
from ..core.job import Job
from ..core.state import TERMINAL_STATES, JobState
from .memflow import MemoryFlow
from .memlimits import MemoryLimits

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_CANCELLABLE = (JobState.PENDING, *_DELAYED, JobState.WAITING)
_REQUEUEABLE = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)


class MemoryJobAdmin:
    """The operator actions of ``MemoryBroker`` (see the module docstring)."""

    _lock: threading.RLock
    _jobs: dict[str, Job]
    _ready_seq: dict[str, int]
    _tokens: dict[str, str]
    _paused: set[str]
    _known_queues: set[str]
    _idem: dict[tuple[str, str], tuple[str, float]]
    flow: MemoryFlow
    limits: MemoryLimits
    _make_ready: Callable[[Job], None]
    _make_delayed: Callable[[Job], None]
    _emit: Callable[..., None]
    _finish: Callable[[Job], None]
    _notify: Callable[[], None]

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
            self._release_key(job)
            self.flow.dropped(job_id)
            self._ready_seq.pop(job_id, None)
            self._tokens.pop(job_id, None)
            return True

    def _release_key(self, job: Job) -> None:
        """Free the idempotency key of a deleted job (fenced: only the key it still holds)."""
        key = (job.queue, job.idempotency_key or "")
        if self._idem.get(key, ("",))[0] == job.id:
            del self._idem[key]

    def cancel(self, job_id: str, now: float) -> bool:
        """Cancel a not-yet-started job."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state not in _CANCELLABLE:
                return False
            lifecycle.cancel(job, now)
            self._emit("cancelled", job, now)
            self._finish(job)
            self.flow.done(job, now)
            return True

    def requeue(self, job_id: str, now: float) -> bool:
        """Revive a dead or cancelled job."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state not in _REQUEUEABLE:
                return False
            lifecycle.requeue(job, now)
            self._emit("requeued", job, now)
            self._make_ready(job)
            return True

    def purge(
        self,
        now: float,
        *,
        state: JobState = JobState.DEAD_LETTER,
        older_than: float | None = None,
        queue: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete matching terminal jobs."""
        if state not in TERMINAL_STATES:
            raise ValueError("purge: only terminal states can be purged")
        with self._lock:
            wanted = set(ids) if ids is not None else None
            doomed = [
                job
                for job in self._jobs.values()
                if job.state is state
                and (queue is None or job.queue == queue)
                and (wanted is None or job.id in wanted)
                and (older_than is None or (job.finished_at or 0) <= now - older_than)
            ]
            for job in doomed:
                del self._jobs[job.id]
                self._release_key(job)
                self.flow.dropped(job.id)
            return len(doomed)

    def clear_queue(self, queue: str, now: float) -> int:
        """Delete the waiting jobs of ``queue`` (heap entries of deleted jobs are skipped); a
        workflow node is cancelled instead, so its dependants end (docs/workflows.md). Rounds
        until none is left: a dependant that cancel released into this queue goes too."""
        with self._lock:
            total = 0
            while doomed := [
                j
                for j in self._jobs.values()
                if j.queue == queue and (j.state is JobState.PENDING or j.state in _DELAYED)
            ]:
                for job in doomed:
                    if self.flow.node(job.id) is not None:
                        self.cancel(job.id, now)
                        continue
                    del self._jobs[job.id]
                    self._release_key(job)
                    self.flow.dropped(job.id)
                    self._ready_seq.pop(job.id, None)
                total += len(doomed)
            self.limits.forget_queue(queue)  # issue 15: its groups go with their jobs
            return total

    def pause(self, queue: str) -> None:
        """Pause a queue."""
        with self._lock:
            self._paused.add(queue)
            self._known_queues.add(queue)

    def resume(self, queue: str) -> None:
        """Resume a queue."""
        with self._lock:
            self._paused.discard(queue)
            self._notify()

    def paused_queues(self) -> set[str]:
        """Paused queue names."""
        with self._lock:
            return set(self._paused)

    def queues(self) -> list[str]:
        """Known queues."""
        with self._lock:
            return sorted(self._known_queues)
