"""MemoryBroker: the reference implementation of the protocol, thread-safe, in one process.

Used by tests, simulations and ``memory://`` apps. Its code is the plainest statement of the
semantics; the SQLite and Redis backends must behave the same (tests/contract checks it).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ..config import Retention
from ..core import lifecycle
from ..core.flow import unique_holds
from ..core.job import Job
from ..core.serialization import decode_job
from ..core.state import TERMINAL_STATES, JobState
from ..errors import DuplicateJob, LeaseLost
from .base import Ack, Broker, Claimed, EnqueueResult, Lease
from .memadmin import MemoryJobAdmin
from .memflow import MemoryFlow, MemoryWorkflows
from .memlimits import MemoryLimits, MemoryLimitsAdmin, MemoryLimitsHooks
from .memreads import MemoryReads
from .memstore import MemoryCounters, MemoryDocs, MemoryEvents, MemoryLogs
from .memtimers import TimeHeap

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_CANCELLABLE = (JobState.PENDING, *_DELAYED, JobState.WAITING)
_REQUEUEABLE = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)


class MemoryBroker(
    MemoryWorkflows, MemoryReads, MemoryJobAdmin, MemoryLimitsAdmin, MemoryLimitsHooks, Broker
):
    """All state in dicts and heaps behind one lock."""

    events: MemoryEvents  # job transitions ``emit`` into it under the lock
    supports_flow = True  # rate limits, concurrency, fair groups (issue 15)

    def __init__(self, retention: Retention | None = None, url: str = "memory://") -> None:
        self.url = url
        self.retention = retention or Retention()
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._changes = 0  # bumped with every notify of _wake (see wait_for_work)
        self._seen = threading.local()  # per thread: _changes as of its last claim
        self._ended = threading.Condition(self._lock)  # notified when a job finishes (watch)
        self._ends = 0  # jobs finished so far: the cursor of change_cursor / wait_change
        self._jobs: dict[str, Job] = {}
        self._tokens: dict[str, str] = {}
        self._ready: dict[str, list[tuple[int, int, str]]] = {}
        self._ready_seq: dict[str, int] = {}
        self._delayed = TimeHeap(self._is_delayed)  # scheduled / retry_scheduled, by run_at
        self._leases = TimeHeap(self._is_leased)  # active jobs, by lease deadline
        self._idem: dict[tuple[str, str], tuple[str, float]] = {}
        self._finished: dict[str, deque[str]] = {}
        self._paused: set[str] = set()
        self._known_queues: set[str] = set()
        self._seq = itertools.count(1)
        self.docs, self.logs = MemoryDocs(self._lock), MemoryLogs(self._lock)
        self.events = MemoryEvents(self._lock, self.retention.events_max)
        self.counters = MemoryCounters(self._lock)
        self.flow = MemoryFlow(self)  # issue 16: workflow nodes and edges (broker/memflow.py)
        self.limits = MemoryLimits()  # issue 15: groups, buckets, slots (broker/memlimits.py)
        self.limits.lookup = self._pending_seq

    # ------------------------------------------------------------------ helpers
    def _emit(self, kind: str, job: Job, now: float, **extra: Any) -> None:
        event = {"type": kind, "job_id": job.id, "queue": job.queue, "task": job.task, "at": now}
        event.update(extra)
        self.events.emit(event)

    def _make_ready(self, job: Job) -> None:
        seq = next(self._seq)
        self._ready_seq[job.id] = seq
        if job.flow is not None:  # flow-controlled: waits in its group (memlimits.py)
            self.limits.add(job, seq)
            self._notify()
            return
        heapq.heappush(self._ready.setdefault(job.queue, []), (job.priority, seq, job.id))
        self._notify()

    def _make_delayed(self, job: Job) -> None:
        self._delayed.push(job.run_at, job.id)
        self._notify()  # an idle worker recomputes how long to sleep

    def _notify(self) -> None:
        self._changes += 1
        self._wake.notify_all()

    def _is_delayed(self, job_id: str, run_at: float) -> bool:
        job = self._jobs.get(job_id)
        return job is not None and job.state in _DELAYED and job.run_at == run_at

    def _is_leased(self, job_id: str, deadline: float) -> bool:
        job = self._jobs.get(job_id)
        return job_id in self._tokens and job is not None and job.lease_expires_at == deadline

    def _place(self, job: Job) -> None:
        if job.state is JobState.PENDING:
            self._make_ready(job)
        elif job.state in _DELAYED:
            self._make_delayed(job)

    def _leased(self, job_id: str, token: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None or job.state is not JobState.ACTIVE or self._tokens.get(job_id) != token:
            raise LeaseLost(job_id)
        return job

    def _finish(self, job: Job) -> None:
        self._unlease(job)
        self._ends += 1
        self._ended.notify_all()  # waiters on a job's result (a separate condition: idle
        # workers on _wake are not woken by finishing jobs)
        ring = self._finished.setdefault(f"{job.queue}|{job.state}", deque())
        ring.append(job.id)
        cap = (
            self.retention.completed_max
            if job.state is JobState.COMPLETED
            else self.retention.dead_letter_max
            if job.state in (JobState.DEAD_LETTER, JobState.EXPIRED)
            else None
        )
        while cap is not None and len(ring) > cap:
            self._drop(ring.popleft(), job.state)

    def _drop(self, job_id: str, state: JobState) -> None:
        job = self._jobs.get(job_id)
        if job is not None and job.state is state:
            del self._jobs[job_id]
            self.flow.dropped(job_id)

    # ------------------------------------------------------------------ producers
    def enqueue(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """Store all jobs or none; see ``Broker.enqueue``."""
        with self._lock:
            results: list[EnqueueResult] = []
            fresh: list[tuple[Job, bytes | None]] = []
            seen_ids: set[str] = set()
            batch_keys: dict[tuple[str, str], str] = {}
            for i, job in enumerate(jobs):
                if job.id in self._jobs or job.id in seen_ids:
                    raise DuplicateJob(job.id)
                key = (job.queue, job.idempotency_key) if job.idempotency_key else None
                existing = self._live_key(key, now) if key else None
                if existing is not None and key and key[1].startswith(("unique:", "debounce:")):
                    held = self._jobs.get(existing)
                    if not unique_holds(key[1], str(held.state) if held else None):
                        existing = None
                if key and existing is None:
                    existing = batch_keys.get(key)
                if existing is not None:
                    state = self._jobs[existing].state if existing in self._jobs else job.state
                    results.append(EnqueueResult(existing, True, state))
                    continue
                if key:
                    batch_keys[key] = job.id
                seen_ids.add(job.id)
                fresh.append((job, None if payloads is None else payloads[i]))
                results.append(EnqueueResult(job.id, False, job.state))
            for job, payload in fresh:
                stored = self._snap(job) if payload is None else decode_job(payload)
                self._jobs[job.id] = stored
                self._known_queues.add(job.queue)
                if job.idempotency_key:
                    self._idem[(job.queue, job.idempotency_key)] = (
                        job.id,
                        now + job.idempotency_ttl,
                    )
                self._place(stored)
                self._emit("enqueued", stored, now, state=str(stored.state))
            return results

    def _live_key(self, key: tuple[str, str], now: float) -> str | None:
        item = self._idem.get(key)
        if item is None:
            return None
        if item[1] <= now:
            del self._idem[key]
            return None
        return item[0]

    # ------------------------------------------------------------------ consumers
    def claim(
        self,
        queues: Sequence[str],
        now: float,
        *,
        limit: int = 1,
        visibility_timeout: float = 30.0,
        worker_id: str = "",
        max_lost: int = 3,
    ) -> Claimed:
        """Lease up to ``limit`` ready jobs, queues in the given order.

        First, for every queue: due delayed jobs become pending, expired leases come back.
        """
        with self._lock:
            self._promote(now, 10_000)
            self._expire(now, max_lost)
            leases: list[Lease] = []
            for queue in queues:
                if queue in self._paused:
                    continue
                if self.limits.heaps.get(queue):  # grouped jobs first (issue 15)
                    ok = partial(self._not_lapsed, now=now)
                    for grouped in self.limits.take(queue, now, limit - len(leases), ok):
                        leases.append(self._lease_one(grouped, now, visibility_timeout, worker_id))
                heap = self._ready.get(queue, [])
                while heap and len(leases) < limit:
                    _, seq, job_id = heapq.heappop(heap)
                    job = self._jobs.get(job_id)
                    if job is None or job.state is not JobState.PENDING:
                        continue
                    if self._ready_seq.get(job_id) != seq:
                        continue
                    if job.expires_at is not None and not self._not_lapsed(job, now):
                        continue
                    # _lease_one, inlined: the hot path of every claim
                    lifecycle.claim(job, now, visibility_timeout, worker_id)
                    token = f"{job.attempts}.{next(self._seq)}"
                    self._tokens[job_id] = token
                    self._leases.push(now + visibility_timeout, job_id)
                    self._emit("started", job, now, attempt=job.attempts, worker=worker_id)
                    leases.append(Lease(self._snap(job), token, now + visibility_timeout))
                if len(leases) >= limit:
                    break
            self._seen.changes = self._changes
            if leases:
                return Claimed(leases)
            served = [q for q in queues if q not in self._paused]
            nexts = (self._delayed.next_time(), self._leases.next_time())
            times = [t for t in (*nexts, self.limits.next_time(served, now)) if t is not None]
            return Claimed.of(leases, min(times) if times else None)

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

    # ------------------------------------------------------------------ maintenance
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

    # ------------------------------------------------------------------ admin
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
                job.id
                for job in self._jobs.values()
                if job.state is state
                and (queue is None or job.queue == queue)
                and (wanted is None or job.id in wanted)
                and (older_than is None or (job.finished_at or 0) <= now - older_than)
            ]
            for job_id in doomed:
                del self._jobs[job_id]
                self.flow.dropped(job_id)
            return len(doomed)

    def clear_queue(self, queue: str, now: float) -> int:
        """Delete the waiting jobs of ``queue`` (heap entries of deleted jobs are skipped)."""
        with self._lock:
            doomed = [
                j.id
                for j in self._jobs.values()
                if j.queue == queue and (j.state is JobState.PENDING or j.state in _DELAYED)
            ]
            for job_id in doomed:
                del self._jobs[job_id]
                self.flow.dropped(job_id)
                self._ready_seq.pop(job_id, None)
            self.limits.forget_queue(queue)  # issue 15: its groups go with their jobs
            return len(doomed)

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

    def flush_all(self) -> None:
        """Forget everything."""
        with self._lock:
            self.__init__(self.retention, self.url)  # type: ignore[misc]
