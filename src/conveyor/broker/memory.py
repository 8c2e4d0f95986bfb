"""MemoryBroker: the reference implementation of the protocol, thread-safe, in one process.

Used by tests, simulations and ``memory://`` apps. Its code is the plainest statement of the
semantics; the SQLite and Redis backends must behave the same (tests/contract checks it). This
module holds the state, ``enqueue`` and ``claim``; the other transitions are mixins by duty
(memfinish.py, memmaint.py, memadmin.py, memreads.py).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Sequence
from functools import partial
from typing import Any

from ..config import Retention
from ..core import lifecycle
from ..core.flow import unique_holds
from ..core.job import Job
from ..core.serialization import decode_job
from ..core.state import JobState
from ..errors import DuplicateJob, LeaseLost
from .base import Broker, Claimed, EnqueueResult, Lease
from .memadmin import MemoryJobAdmin
from .memfinish import MemoryFinish
from .memflow import MemoryFlow, MemoryWorkflows
from .memlimits import MemoryLimits, MemoryLimitsAdmin, MemoryLimitsHooks
from .memmaint import MemoryMaintenance
from .memreads import MemoryReads
from .memstore import MemoryCounters, MemoryDocs, MemoryEvents, MemoryLogs
from .memtimers import TimeHeap

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)


class MemoryBroker(
    MemoryWorkflows,
    MemoryReads,
    MemoryJobAdmin,
    MemoryLimitsAdmin,
    MemoryLimitsHooks,
    MemoryMaintenance,
    MemoryFinish,
    Broker,
):
    """All state in dicts and heaps behind one lock.

    Here: the state, the helpers that file a job by its state, ``enqueue`` and ``claim``. The
    rest lives in mixins by duty: the lease holder's transitions (``memfinish.py``), timers and
    retention (``memmaint.py``), operator actions and queue flags (``memadmin.py``), reads and
    waits (``memreads.py``), flow control (``memlimits.py``), workflows (``memflow.py``).
    """

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
                    bury = partial(
                        self._bury_flow,
                        now=now,
                        visibility_timeout=visibility_timeout,
                        worker_id=worker_id,
                    )
                    for grouped in self.limits.take(queue, now, limit - len(leases), ok, bury):
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
            if len(leases) >= limit:
                return Claimed(leases)
            served = [q for q in queues if q not in self._paused]
            nexts = (self._delayed.next_time(), self._leases.next_time())
            times = [t for t in (*nexts, self.limits.next_time(served, now)) if t is not None]
            return Claimed.of(leases, min(times) if times else None, limit=limit)

    def flush_all(self) -> None:
        """Forget everything."""
        with self._lock:
            self.__init__(self.retention, self.url)  # type: ignore[misc]
