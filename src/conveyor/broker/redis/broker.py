"""RedisBroker: the Broker protocol on Redis — every state change is ONE Lua script.

Scripts live in ``lua/`` (one per transition), keys in ``keys.py``; see docs/wire-format.md and
docs/architecture-redis.md. Highlights:

* ``claim`` promotes due jobs and leases up to ``limit`` jobs of a queue in one script call
  (state, attempts, lease deadline, fencing token ``"<n>:<queue>"``, started event); queues are
  tried in the given order, the next only when the previous could not fill ``limit``.
* ``complete`` and ``extend`` take batches: one script call per queue, pipelined.
* Fencing tokens name their queue, so finishing calls need no lookup.
* ``enqueue`` (``enqueuing.py``) is one script call: atomic across queues on a standalone
  server; in Redis Cluster a batch must stay within one queue (one slot), else
  ``ValidationError("jobs")``.
* Idle workers block in ``wait_for_work`` on BLPOP of the queues' wake lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...config import Retention
from ...core.job import Job, validate_queue_name
from ...core.state import TERMINAL_STATES, JobState
from ...errors import DecodeError, LeaseLost
from ..base import Ack, Broker, Claimed, EnqueueResult, Lease
from . import aio, codec
from .admin import JobAdminMixin
from .codec import fmt_time
from .codes import ScriptCode, options
from .enqueuing import EnqueueMixin
from .flowadmin import FlowAdminMixin
from .idlequeues import skip_idle
from .keys import TERMINAL_SETS
from .lifecycle import LifecycleMixin
from .plumbing import guarded, token_queue
from .reads import ReadsMixin
from .scriptargs import (
    claim_args,
    complete_head,
    fail_options,
    reap_options,
    release_options,
)
from .scripts import Call
from .side import RedisCounters, RedisDocs, RedisEvents, RedisLogs
from .workflows import RedisWorkflows

PURGE_BATCH = 1000
CLAIM_WIDTH = 3  # values per job in claim.lua's flat reply (see its header)


class RedisBroker(
    EnqueueMixin,
    RedisWorkflows,
    ReadsMixin,
    LifecycleMixin,
    JobAdminMixin,
    FlowAdminMixin,
    Broker,
):
    """Redis (standalone, Sentinel or Cluster) backend; build it with ``from_url``."""

    has_server_clock = True
    supports_flow = True  # rate limits, concurrency, fair groups (issue 15; lua/_flow.lua)
    # Guarded here, not in flowadmin.py (plumbing imports that module): an unreachable server
    # is BrokerUnavailable for the limits page and `conveyor limits`, never a raw redis error.
    flow_set_limit = guarded(FlowAdminMixin.flow_set_limit)
    flow_status = guarded(FlowAdminMixin.flow_status)

    def __init__(self, url: str, retention: Retention | None = None) -> None:
        super().__init__(url, retention)
        self.docs, self.logs = RedisDocs(self), RedisLogs(self)  # side stores: composed parts
        self.events, self.counters = RedisEvents(self), RedisCounters(self)
        self.aclients = aio.AsyncClients()  # redis.asyncio clients, one per event loop

    @classmethod
    def from_url(cls, url: str, retention: Retention | None = None) -> RedisBroker:
        """Broker for a ``redis[s]://``, ``redis+sentinel://`` or ``redis+cluster://`` URL."""
        return cls(url, retention)

    async def enqueue_async(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """``enqueue`` on the native async client (``aio.py``)."""
        return await aio.enqueue(self, jobs, now, payloads, fresh_ids)

    async def watch_async(self, job_id: str, queue: str, timeout: float) -> Job | None:
        """``watch`` on the native async client: XREAD of the queue's event stream."""
        return await aio.watch(self, job_id, queue, timeout)

    # ------------------------------------------------------------------ consumers
    @guarded
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
        """Lease up to ``limit`` jobs, queues in the given order (one script call per queue).

        Each call first promotes due jobs and returns expired leases of its queue; an empty or
        short claim reports the earliest ``next_due`` of the queues read (claim.lua).
        """
        leases: list[Lease] = []
        expires = now + visibility_timeout
        at, deadline = fmt_time(now), fmt_time(expires)
        claimed_job, new_lease = codec.claimed_job, Lease.fast
        more = False
        skip, next_due = skip_idle(self, queues, now)  # queues known empty (issue 18)
        idle = self._idle
        for queue in queues:
            if queue in skip:
                continue
            while len(leases) < limit:
                want = limit - len(leases)
                args = claim_args(queue, at, deadline, want, worker_id, max_lost, self.retention)
                seen = idle.seen(queue) if idle is not None else 0
                reply = self.runner.run("claim", self.qkeys(queue), args)
                more = more or reply[0] == ScriptCode.MORE
                due = float(reply[1]) if reply[1] else None
                if due is not None:
                    next_due = due if next_due is None else min(next_due, due)
                if idle is not None:  # empty: no more ready, fewer jobs than asked
                    got = (len(reply) - 3) // CLAIM_WIDTH
                    idle.note(queue, now, reply[0] != ScriptCode.MORE and got < want, due, seen)
                buried = 0
                where = self._where
                where.make_room(len(reply) // CLAIM_WIDTH)
                slow = codec.claim_hash_values(reply[2])
                for k in range(3, len(reply), CLAIM_WIDTH):  # flat: 3 values per job
                    extra = slow.get(k // CLAIM_WIDTH) if slow else None
                    item = (reply[k], reply[k + 1], reply[k + 2], extra)
                    try:
                        job = claimed_job(item, queue, now, expires, worker_id)
                    except Exception as exc:  # one bad job never fails the batch
                        message = str(exc) if isinstance(exc, DecodeError) else repr(exc)
                        self._bury_claimed(queue, item, message, worker_id, now)
                        buried += 1
                        continue
                    where[job.id] = queue  # remember(): get() finds the job's queue at once
                    leases.append(new_lease(job, item[1].decode(), expires))
                if not buried:  # the queue gave what it had; undecodable jobs: claim again
                    break
        if more:
            self.wake_all()
        return Claimed.of(leases, next_due, limit=0 if more else limit)  # short: drained

    def _bury_claimed(
        self, queue: str, item: Sequence[Any], message: str, worker_id: str, now: float
    ) -> None:
        """A claimed job whose payload does not decode: dead-letter it at once (decode_error)."""
        job_id, fields = codec.claimed_fields(item, "", "", worker_id)
        self._bury_undecodable(queue, job_id, item[1].decode(), fields, message, worker_id, now)

    def _bury_undecodable(
        self,
        queue: str,
        job_id: str,
        token: str,
        fields: dict[bytes, bytes],
        message: str,
        worker_id: str,
        now: float,
    ) -> None:
        entry = codec.decode_error_entry(message, fields, worker_id, now)
        entry_json, _, last_error, _ = codec.error_json(entry, now)
        opts = fail_options(queue, now, None, "decode_error", True, self.retention)
        stub = codec.stub_payload(job_id, queue, fields)
        args = [opts, job_id, token, entry_json, last_error, stub]
        self.runner.run("fail", self.qkeys(queue), args)

    @guarded
    def complete(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """Record successes: one script call per queue, pipelined; False for stale tokens."""
        out = [False] * len(acks)
        groups: dict[str, list[int]] = {}
        for i, ack in enumerate(acks):
            queue = token_queue(ack.token)
            if queue is not None:
                idxs = groups.get(queue)
                if idxs is None:
                    groups[queue] = [i]
                else:
                    idxs.append(i)
        calls = []
        at = fmt_time(now)
        result_json = codec.result_json
        ret = self.retention
        for queue, idxs in groups.items():
            args = complete_head(queue, at, ret)
            for i in idxs:
                ack = acks[i]
                result = b"" if ack.result is None else result_json(ack.result)
                if ack.error is None:
                    args += (ack.job_id, ack.token, result, "", "")
                else:
                    entry, _, last_error, _ = codec.error_json(ack.error, now)
                    args += (ack.job_id, ack.token, result, entry, last_error)
            calls.append(Call("complete", self.qkeys(queue), args))
        recorded = ScriptCode.OK
        for idxs, reply in zip(groups.values(), self.runner.run_many(calls), strict=True):
            for i, ok in zip(idxs, reply, strict=True):
                out[i] = ok == recorded
        return out

    @guarded
    def fail(
        self,
        job_id: str,
        token: str,
        now: float,
        *,
        error: Mapping[str, Any],
        retry_at: float | None,
    ) -> JobState:
        """Record a failed attempt; retry later or dead-letter. ``LeaseLost`` on a stale token."""
        queue = token_queue(token)
        if queue is None:
            raise LeaseLost(job_id)
        entry, has_attempt, last_error, kind = codec.error_json(error, now)
        opts = fail_options(queue, now, retry_at, kind, has_attempt, self.retention)
        args = [opts, job_id, token, entry, last_error, ""]
        reply = self.runner.run("fail", self.qkeys(queue), args)
        if reply[0] != ScriptCode.OK:
            raise LeaseLost(job_id)
        if retry_at is not None and self.cluster:
            self.wake_all()  # fail.lua woke the queue's own workers
        return JobState(reply[1].decode())

    @guarded
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
        """Give a leased job back (now, or after ``delay``). ``LeaseLost`` on a stale token."""
        queue = token_queue(token)
        if queue is None:
            raise LeaseLost(job_id)
        opts = release_options(queue, now, delay, penalize, note, self.retention)
        reply = self.runner.run("release", self.qkeys(queue), [opts, job_id, token])
        if reply[0] != ScriptCode.OK:
            raise LeaseLost(job_id)
        state = JobState(reply[1].decode())
        self.wake_all()  # pending, or scheduled: idle workers recompute their next due time
        return state

    @guarded
    def cancel_running(
        self, job_id: str, token: str, now: float, *, note: str = "cancelled while running"
    ) -> JobState:
        """active → cancelled by the lease holder (cancel_running.lua, fenced)."""
        queue = token_queue(token)
        if queue is None:
            raise LeaseLost(job_id)
        opts = options(
            queue=queue, now=fmt_time(now), note=note, events_max=str(self.retention.events_max)
        )
        reply = self.runner.run("cancel_running", self.qkeys(queue), [opts, job_id, token])
        if reply[0] != ScriptCode.OK:
            raise LeaseLost(job_id)
        return JobState.CANCELLED

    @guarded
    def extend(
        self, leases: Sequence[tuple[str, str]], now: float, visibility_timeout: float
    ) -> list[bool]:
        """Push lease deadlines: one script call per queue, pipelined; False where lost."""
        out = [False] * len(leases)
        groups: dict[str, list[int]] = {}
        for i, (_, token) in enumerate(leases):
            queue = token_queue(token)
            if queue is not None:
                groups.setdefault(queue, []).append(i)
        deadline = fmt_time(now + visibility_timeout)
        calls = []
        for queue, idxs in groups.items():
            args: list[Any] = [deadline]
            for i in idxs:
                args += [leases[i][0], leases[i][1]]
            calls.append(Call("extend", self.qkeys(queue), args))
        for idxs, reply in zip(groups.values(), self.runner.run_many(calls), strict=True):
            for i, ok in zip(idxs, reply, strict=True):
                out[i] = ok == ScriptCode.OK
        return out

    # ------------------------------------------------------------------ maintenance
    @guarded
    def promote_due(self, now: float, limit: int = 1000) -> int:
        """Move due scheduled / retry_scheduled jobs to pending, queue by queue."""
        moved = 0
        for queue in self.known_queues():
            if moved >= limit:
                break
            args = [fmt_time(now), limit - moved]
            moved += int(self.runner.run("promote", self.qkeys(queue), args))
        if moved:
            self.wake_all()
        return moved

    @guarded
    def reap_expired(self, now: float, *, max_lost: int = 3) -> int:
        """Return expired leases to pending (poison pills: dead letter); drop old finished jobs."""
        ret = self.retention
        queues = self.known_queues()
        reaped = 0
        while queues:
            calls = [
                Call("reap", self.qkeys(q), [reap_options(q, now, max_lost, ret)]) for q in queues
            ]
            replies = self.runner.run_many(calls)
            reaped += sum(int(r[0]) for r in replies)
            queues = [q for q, r in zip(queues, replies, strict=True) if r[1] == ScriptCode.MORE]
        if reaped:
            self.wake_all()
        self.sweep_workflows(now)  # graphs whose jobs are all gone (workflows.py)
        return reaped

    # ------------------------------------------------------------------ admin
    @guarded
    def clear_queue(self, queue: str, now: float) -> int:
        """Delete the waiting jobs of ``queue``, ``PURGE_BATCH`` per atomic script call; a
        workflow node is cancelled instead (its dependants end), and a call runs again until
        one finds nothing: a cancel may release a dependant into this queue."""
        total = 0
        args = [PURGE_BATCH, queue, fmt_time(now), self.retention.events_max]
        while n := int(self.runner.run("clear", self.qkeys(queue), args)):
            total += n
        return total

    @guarded
    def purge(
        self,
        now: float,
        *,
        state: JobState = JobState.DEAD_LETTER,
        older_than: float | None = None,
        queue: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete terminal jobs in ``state`` finished more than ``older_than`` s ago."""
        if state not in TERMINAL_STATES:
            raise ValueError("purge: only terminal states can be purged")
        assert str(state) in TERMINAL_SETS
        cutoff = "+inf" if older_than is None else fmt_time(now - older_than)
        queues = [queue] if queue is not None else self.known_queues()
        total = 0
        for q in queues:
            if ids is not None:
                id_list = list(ids)
                for start in range(0, len(id_list), PURGE_BATCH):
                    chunk = id_list[start : start + PURGE_BATCH]
                    args = [str(state), cutoff, PURGE_BATCH, *chunk]
                    total += int(self.runner.run("purge", self.qkeys(q), args))
                continue
            while True:
                n = int(self.runner.run("purge", self.qkeys(q), [str(state), cutoff, PURGE_BATCH]))
                total += n
                if n < PURGE_BATCH:
                    break
        return total

    @guarded
    def pause(self, queue: str) -> None:
        """Stop handing out jobs of ``queue``."""
        key = self.keys.queue_key(validate_queue_name(queue), "paused")
        self.register([queue])
        self.client.set(key, "1")

    @guarded
    def resume(self, queue: str) -> None:
        """Undo ``pause`` and wake idle workers."""
        wake = self.keys.queue_key(validate_queue_name(queue), "wake")
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(self.keys.queue_key(queue, "paused"))
        pipe.lpush(wake, "1")
        pipe.ltrim(wake, 0, 15)
        pipe.execute()
        self.wake_all()
