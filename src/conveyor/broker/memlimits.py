"""Flow control of the memory broker (issue 15): groups, token buckets, concurrency slots.

Runs under the broker's lock, inside its claim. A pending job with a ``flow`` record waits in
its group (``core/flow.py``), not in the queue's ready heap. Each queue keeps its *scheduled*
groups in ``(eligible at, round-robin number, group)`` order (a ``Line``: a deque for the
in-order round-robin, a heap for the rest; no scan or sort): a claim pops the groups that
are eligible now, asks their limiters, leases one job of each group that may run and puts the
group back behind the others (round-robin: fairness). A group whose bucket is empty goes back
at the time of its next token; one whose concurrency slots are full waits, off the heap, until
a slot frees. Empty groups are forgotten (idle groups cost nothing), so the claim's cost is the
number of groups it touches, never the number of groups that exist.

Concurrency slots record their owning job ids; only the owner's end of lease frees its slot
(complete, fail, release or an expired lease: a dead worker's slots free with its lease).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..core import lifecycle
from ..core.flow import (
    bucket_take,
    flow_problem,
    is_queue_limiter,
    limiter_base,
    limiter_label,
    stagger,
)
from ..core.job import Job
from ..core.state import JobState
from .base import Lease

if TYPE_CHECKING:
    from .memflow import MemoryFlow

Eligible = Callable[[Job], bool]
Entry = tuple[float, int, str]  # (eligible at, round-robin number, group)


class Line:
    """A queue's scheduled groups in ``(eligible at, round-robin number)`` order, as one heap
    would keep them, but cheaper: a deque that stays sorted while entries arrive in order (a
    group put back behind the others at the claim's time: the round-robin of every claim, O(1))
    plus a heap for the entries that arrive out of order (a new group at 0, a throttled one at
    its next token). Popping takes the smaller of the two heads."""

    __slots__ = ("heap", "line")

    def __init__(self) -> None:
        self.line: deque[Entry] = deque()
        self.heap: list[Entry] = []

    def __len__(self) -> int:
        return len(self.line) + len(self.heap)

    def push(self, entry: Entry) -> None:
        """Schedule ``entry`` (round-robin numbers are unique: groups are never compared)."""
        line = self.line
        if not line or line[-1] < entry:
            line.append(entry)
        else:
            heapq.heappush(self.heap, entry)

    def first(self) -> Entry | None:
        """The earliest entry, or None."""
        line, heap = self.line, self.heap
        if line and (not heap or line[0] < heap[0]):
            return line[0]
        return heap[0] if heap else None

    def pop_due(self, now: float) -> Entry | None:
        """Remove and return the earliest entry if it is eligible at ``now``, else None."""
        line, heap = self.line, self.heap
        if line and (not heap or line[0] < heap[0]):
            return line.popleft() if line[0][0] <= now else None
        return heapq.heappop(heap) if heap and heap[0][0] <= now else None


class MemoryLimits:
    """Groups, buckets and slots of every queue of one memory broker."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
        self.heaps: dict[str, Line] = {}
        self.placed: dict[tuple[str, str], int] = {}  # group -> its live entry's number
        self.buckets: dict[str, tuple[float, float]] = {}
        self.slots: dict[str, set[str]] = {}  # slot name -> owning job ids
        self.waiters: dict[str, set[tuple[str, str]]] = {}  # slot name -> groups waiting
        self.blocked: dict[tuple[str, str], str] = {}  # group -> why it waits (operators)
        self.parked: set[tuple[str, str]] = set()  # groups off the heap until a slot frees
        self.overrides: dict[str, list[float]] = {}  # limiter (or its base) -> run-time spec
        self.queue_blocked = False  # the last _admit was refused by a limit of the whole queue
        self.behind: dict[str, int] = {}  # per bucket, the groups the running claim set aside
        self.held: dict[str, float] = {}  # queue -> when its own limit allows again (take)
        self._rr = itertools.count(1)

    # ------------------------------------------------------------------ placing
    def add(self, job: Job, seq: int) -> None:
        """A grouped job became pending: into its group; the group is scheduled if idle."""
        key = (job.queue, str(job.flow["g"] if job.flow else ""))
        heapq.heappush(self.jobs.setdefault(key, []), (job.priority, seq, job.id))
        if key not in self.placed and key not in self.parked:
            self._schedule(key, 0.0)

    def _schedule(self, key: tuple[str, str], at: float) -> None:
        rr = self.placed[key] = next(self._rr)  # unique: it alone tells a live entry
        line = self.heaps.get(key[0])
        if line is None:
            line = self.heaps[key[0]] = Line()
        line.push((at, rr, key[1]))

    # ------------------------------------------------------------------ claiming
    def take(
        self, queue: str, now: float, want: int, ok: Eligible, bury: Callable[[Job], None]
    ) -> list[Job]:
        """Up to ``want`` jobs of ``queue``'s groups that their limiters let run now.

        ``ok(job)``: the broker's check that a group's head, a pending job with an expiry, has
        not lapsed (a lapsed one is skipped). ``bury(job)``: the broker dead-letters a head
        whose flow record is malformed (``flow_problem``), which is not handed out.
        """
        line = self.heaps.get(queue)
        out: list[Job] = []
        self.held.pop(queue, None)
        placed, groups = self.placed, self.jobs
        self.behind = {}  # groups set aside per bucket by this claim (core/flow.py stagger)
        while line is not None and len(out) < want:
            due = line.pop_due(now)
            if due is None:
                break
            key = (queue, due[2])
            if placed.get(key) != due[1]:
                continue  # a stale entry: the group was rescheduled since
            del placed[key]
            job = self._head(key, ok)
            if job is None:
                self.blocked.pop(key, None)
                continue  # empty: forgotten until a job arrives
            flow = job.flow or {}
            # a malformed record (hostile storage) asks no limiter and takes nothing: ``bury``
            bad = flow_problem(flow) is not None
            # a fair-only group has no limiter to ask (as on Redis): it may always run
            limited = not bad and ("r" in flow or "c" in flow)
            verdict = self._admit(job, key, now) if limited else None
            if verdict is None:
                heap = groups[key]
                heapq.heappop(heap)
                if bad:
                    bury(job)
                else:
                    out.append(job)
                if heap:
                    self._schedule(key, now)  # behind every group eligible now: round-robin
                else:
                    del groups[key]  # its last job leased: the group is forgotten
            else:
                if verdict != float("inf"):  # inf: parked until a slot frees (``free``)
                    self._schedule(key, verdict)
                if self.queue_blocked:  # the queue's own limit said no: nothing else may start
                    self.held[queue] = verdict  # (inf: until one of its slots frees)
                    break
        return out

    def _head(self, key: tuple[str, str], ok: Eligible) -> Job | None:
        heap = self.jobs.get(key)
        lookup = self.lookup
        while heap:
            _, seq, job_id = heap[0]
            job = lookup(job_id, seq)
            if job is not None and (job.expires_at is None or ok(job)):
                return job
            heapq.heappop(heap)
        self.jobs.pop(key, None)
        return None

    lookup: Callable[[str, int], Job | None]  # set by the broker: a pending job with that seq

    def _admit(self, job: Job, key: tuple[str, str], now: float) -> float | None:
        """None: the job may run (tokens and slot taken); else when to look at its group again
        (``inf``: when a slot frees)."""
        flow = job.flow or {}
        self.queue_blocked = False  # set when a limit of the whole queue says no
        for name, limit in flow.get("c") or ():
            n = int(self._spec(name, [limit])[0]) if self.overrides else int(limit)
            running = self.slots.get(name)
            busy = len(running) if running else 0
            if busy >= n:
                self.queue_blocked = is_queue_limiter(name)
                self.waiters.setdefault(name, set()).add(key)
                self.parked.add(key)
                self.blocked[key] = f"waiting for {limiter_label(name)} ({busy} running)"
                return float("inf")
        wait = 0.0
        takes: list[tuple[str, tuple[float, float]]] = []
        refused: list[str] = []
        for name, *spec in flow.get("r") or ():
            rate, per, burst = self._spec(name, spec)
            taken, state, next_at = bucket_take(self.buckets.get(name), rate, per, burst, now)
            if not taken:
                self.queue_blocked = self.queue_blocked or is_queue_limiter(name)
                # one token later per group this claim already set aside for the bucket
                wait = max(wait, stagger(next_at, self.behind, name, rate, per))
                label = limiter_label(name, [rate, per])
                self.blocked[key] = f"throttled by rate limit {label}"
                refused.append(name)
            takes.append((name, state))
        if wait:
            for name in refused:
                self.behind[name] = self.behind.get(name, 0) + 1
            return wait  # nothing taken: every bucket of the group must have a token
        for name, state in takes:
            self.buckets[name] = state
        for name, _ in flow.get("c") or ():
            owners = self.slots.get(name)
            if owners is None:
                owners = self.slots[name] = set()
            owners.add(job.id)
        self.blocked.pop(key, None)
        return None

    def _spec(self, name: str, spec: list[Any]) -> list[float]:
        """The limit of ``name``: a run-time override of its limiter, else the job's own."""
        found = self.overrides.get(name) or self.overrides.get(limiter_base(name))
        return [float(v) for v in (found or spec)]

    # ------------------------------------------------------------------ releasing
    def free(self, job: Job) -> bool:
        """``job`` left ``active``: its slots free (only if it owns them) and waiters wake;
        True when a waiting group was put back in line."""
        woke = False
        flow = job.flow or {}
        if flow_problem(flow) is None:
            names = [c[0] for c in flow.get("c") or ()]
        else:  # malformed (a Job changed behind the broker's back): the slots naming it
            names = [name for name, owners in self.slots.items() if job.id in owners]
        for name in names:
            owners = self.slots.get(name)
            if owners is None or job.id not in owners:
                continue  # fenced: only the owner frees its slot
            owners.discard(job.id)
            if not owners:
                del self.slots[name]
            for key in self.waiters.pop(name, set()):
                self.blocked.pop(key, None)
                self.parked.discard(key)
                if key not in self.placed and key in self.jobs:
                    self._schedule(key, 0.0)
                    woke = True
        return woke

    def forget_queue(self, queue: str) -> None:
        """``clear_queue``: the queue's groups go with their jobs (off the line, unparked, no
        slot waits); buckets and the slots of running jobs stay."""
        self.heaps.pop(queue, None)
        self.held.pop(queue, None)
        for table in (self.jobs, self.placed, self.blocked):
            for key in [k for k in table if k[0] == queue]:
                del table[key]
        self.parked = {k for k in self.parked if k[0] != queue}
        for name in list(self.waiters):
            self.waiters[name] = {k for k in self.waiters[name] if k[0] != queue}
            if not self.waiters[name]:
                del self.waiters[name]

    def next_time(self, queues: Iterable[str], now: float) -> float | None:
        """The earliest time a group of ``queues`` becomes eligible (for an empty claim); for a
        queue whose own limit stopped the claim with groups still due, when that limit allows
        again (None if it waits for a slot: the slot's release wakes the workers)."""
        times = []
        for q in queues:
            line = self.heaps.get(q)
            first = None if line is None else line.first()
            if first is None:
                continue
            if first[0] > now:
                times.append(first[0])
            elif self.held.get(q, float("inf")) < float("inf"):
                times.append(self.held[q])
        return min(times) if times else None


class MemoryLimitsAdmin:
    """``flow_set_limit`` / ``flow_status`` of the memory broker (mixed into MemoryBroker)."""

    _lock: Any
    limits: MemoryLimits
    _jobs: dict[str, Job]

    def flow_set_limit(self, name: str, spec: list[float] | None) -> None:
        """Override the limit of a limiter (``rate:<task>``) or one bucket / slot; None clears."""
        with self._lock:
            if spec is None:
                self.limits.overrides.pop(name, None)
            else:
                self.limits.overrides[name] = [float(v) for v in spec]
            # every waiting group is looked at again by the next claim, under the new limit
            for key in [*self.limits.parked, *self.limits.placed]:
                self.limits.parked.discard(key)
                if key in self.limits.jobs:
                    self.limits._schedule(key, 0.0)
            self.limits.waiters.clear()

    def flow_status(self, now: float) -> dict[str, Any]:
        """Run-time limits, bucket tokens, running jobs per slot, waiting jobs per group."""
        with self._lock:
            waiting: dict[tuple[str, str], int] = {}
            for job in self._jobs.values():
                if job.flow is not None and job.state is JobState.PENDING:
                    key = (job.queue, str(job.flow["g"]))
                    waiting[key] = waiting.get(key, 0) + 1
            return {
                "limits": {n: list(s) for n, s in sorted(self.limits.overrides.items())},
                "buckets": {n: round(s[0], 3) for n, s in sorted(self.limits.buckets.items())},
                "running": {n: sorted(ids) for n, ids in sorted(self.limits.slots.items())},
                "groups": [
                    {"queue": q, "group": g, "waiting": n, "why": self.limits.blocked.get((q, g))}
                    for (q, g), n in sorted(waiting.items())
                ],
            }


class MemoryLimitsHooks:
    """The memory broker's per-job steps of issue 15 (expiry at claim, slots at lease end),
    kept here so memory.py keeps its size."""

    _jobs: dict[str, Job]
    _ready_seq: dict[str, int]
    _tokens: dict[str, str]
    _seq: Iterator[int]
    _leases: Any
    limits: MemoryLimits
    flow: MemoryFlow  # the workflow nodes and edges (issue 16)
    _notify: Callable[[], None]
    _emit: Callable[..., None]
    _finish: Callable[[Job], None]
    _snap: Callable[[Job], Job]

    def _lapse(self, job: Job, now: float) -> None:
        """pending → expired at claim (issue 15): it never runs; kept like a dead letter."""
        lifecycle.lapse(job, now)
        self._emit("expired", job, now)
        self._finish(job)
        self.flow.done(job, now)  # a workflow node that never ran fails its dependants

    def _pending_seq(self, job_id: str, seq: int) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.state is not JobState.PENDING or self._ready_seq.get(job_id) != seq:
            return None
        return job

    def _unlease(self, job: Job) -> None:
        """The job left ``active``: its token goes, its concurrency slots free (issue 15)."""
        self._tokens.pop(job.id, None)
        if job.flow is not None and self.limits.free(job):
            self._notify()  # an idle worker claims the job that waited for this slot

    def _not_lapsed(self, job: Job, now: float) -> bool:
        if job.expires_at is not None and lifecycle.is_lapsed(job, now):
            self._lapse(job, now)
            return False
        return True

    def _bury_flow(self, job: Job, now: float, visibility_timeout: float, worker_id: str) -> None:
        """A group's head whose flow record is malformed (``flow_problem``; only a Job stored
        behind the broker's back has one: ``MemoryLimits.take``) is claimed and dead-lettered
        at once with kind ``decode_error``, as the stored backends do; the record is kept in
        its metadata."""
        problem = flow_problem(job.flow)
        lifecycle.claim(job, now, visibility_timeout, worker_id)
        self._emit("started", job, now, attempt=job.attempts, worker=worker_id)
        job.metadata = {**job.metadata, "decode_error": problem, "flow": job.flow}
        job.flow = None  # it took no slot (never admitted): nothing to free
        lifecycle.bury_undecodable(job, now, worker_id)
        self._emit("failed", job, now, attempt=job.attempts, error=job.last_error)
        self._emit("dead_lettered", job, now, reason="decode_error")
        self._finish(job)
        self.flow.done(job, now)  # a workflow node's dependants end with it

    def _lease_one(self, job: Job, now: float, visibility_timeout: float, worker_id: str) -> Lease:
        lifecycle.claim(job, now, visibility_timeout, worker_id)
        token = f"{job.attempts}.{next(self._seq)}"
        self._tokens[job.id] = token
        self._leases.push(now + visibility_timeout, job.id)
        self._emit("started", job, now, attempt=job.attempts, worker=worker_id)
        return Lease(self._snap(job), token, now + visibility_timeout)
