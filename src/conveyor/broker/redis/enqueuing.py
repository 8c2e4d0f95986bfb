"""The producer part of the Redis broker: ``enqueue`` (one script call: enqueue_one.lua for one
plain job, enqueue.lua for anything else; batching across threads is ``conveyor.autobatch``), the
argument plan and the results shared with the async client (``aio.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.job import Job
from ...core.state import JobState
from ...errors import DuplicateJob
from ..base import EnqueueResult
from . import idguard
from .codec import fmt_time
from .codes import ScriptCode
from .plumbing import RedisBase, guarded
from .scriptargs import enqueue_group, enqueue_one, enqueue_options, group_batch

_STATES = {state.value.encode(): state for state in JobState}


class EnqueueMixin(RedisBase):
    """``enqueue`` and its plan and results (shared with the async client) of ``RedisBroker``."""

    @guarded
    def enqueue(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """Store all jobs or none (one script call); see ``Broker.enqueue``."""
        if not jobs:
            return []
        if len(jobs) == 1 and (payloads is None or len(payloads) == 1):
            one = self._enqueue_one(
                jobs[0], now, None if payloads is None else payloads[0], fresh_ids
            )
            if one is not None:
                return one
        script, groups, keys, args, order = self.enqueue_plan(jobs, now, payloads)
        self.register(groups)
        # ids unique across queues (see idguard.py); ids the producer just minted need no check
        custom = [] if fresh_ids else idguard.custom_ids(jobs)
        locks = idguard.reserve(self, custom) if custom else None
        try:
            reply = self.runner.run(script, keys, args)
        finally:
            if locks:
                idguard.release(self, locks)
        results = self.enqueue_results(jobs, groups, order, reply)
        if self.cluster and any(not res.duplicate for res in results):
            self.wake_all()  # delayed jobs too: idle workers recompute their next due time
        return results

    def _enqueue_one(
        self, job: Job, now: float, payload: bytes | None, fresh_id: bool
    ) -> list[EnqueueResult] | None:
        """``enqueue`` of one plain job (enqueue_one.lua), or None when that script does not
        take it: the same steps as the general path without its per-batch bookkeeping (the
        producer's common call: ~1 µs of Python less per job)."""
        queue = job.queue
        self.qkeys(queue)  # validates the queue name (cached)
        # the gate before register: a fresh deployment is one with nothing registered yet
        args = enqueue_one(job, payload, now, str(self.retention.events_max), self.fresh_members())
        if args is None:
            return None
        if queue not in self._conn.registered:
            self.register((queue,))
        custom = [] if fresh_id else idguard.custom_ids((job,))
        locks = idguard.reserve(self, custom) if custom else None
        try:
            reply = self.runner.run("enqueue_one", (self.keys.tag(queue),), args)
        finally:
            if locks:
                idguard.release(self, locks)
        if reply[0] == ScriptCode.DUPLICATE_ID:
            raise DuplicateJob(reply[1].decode())
        where = self._where
        where.make_room(1)
        where[job.id] = queue
        if self.cluster:
            self.wake_all()  # delayed jobs too: idle workers recompute their next due time
        return [EnqueueResult(job.id, False, job.state)]

    def enqueue_plan(
        self, jobs: Sequence[Job], now: float, payloads: Sequence[bytes] | None
    ) -> tuple[str, dict[str, list[int]], list[str], list[Any], list[int]]:
        """(script, indexes by queue, KEYS, ARGV, ARGV position -> job index) of one enqueue
        script call; shared by ``enqueue`` and the async client (``aio.py``).

        One plain job (the hot path: no idempotency key, expiry or flow group) goes to
        enqueue_one.lua with one key and eight arguments; anything else to enqueue.lua.
        """
        if payloads is not None and len(payloads) != len(jobs):
            raise ValueError("enqueue: one payload per job")
        events_max = str(self.retention.events_max)  # a string: it goes to XADD as is
        fresh = self.fresh_members()  # before register (the callers register after the plan)
        if len(jobs) == 1:
            queue = jobs[0].queue
            self.qkeys(queue)  # validates the queue name (cached)
            payload = None if payloads is None else payloads[0]
            one = enqueue_one(jobs[0], payload, now, events_max, fresh)
            if one is not None:
                return "enqueue_one", {queue: [0]}, [self.keys.tag(queue)], one, [0]
            groups = {queue: [0]}
        else:
            groups = group_batch(jobs, self.cluster)
        keys: list[str] = []
        args: list[Any] = [enqueue_options(fmt_time(now), events_max, fresh)]
        order: list[int] = []  # batch position in ARGV order -> index in ``jobs``
        for queue, idxs in groups.items():
            keys += self.qkeys(queue)  # validates the queue name
            if len(groups) == 1:
                order = idxs
                args += enqueue_group(queue, jobs, payloads, now)
            else:
                order += idxs
                part = None if payloads is None else [payloads[i] for i in idxs]
                args += enqueue_group(queue, [jobs[i] for i in idxs], part, now)
        return "enqueue", groups, keys, args, order

    def enqueue_results(
        self, jobs: Sequence[Job], groups: dict[str, list[int]], order: list[int], reply: Any
    ) -> list[EnqueueResult]:
        """The results of an enqueue script's ``reply``; remembers where each job lives."""
        if reply[0] == ScriptCode.DUPLICATE_ID:
            raise DuplicateJob(reply[1].decode())
        results = [EnqueueResult(job.id, False, job.state) for job in jobs]
        for n in range(1, len(reply), 3):  # only jobs whose idempotency key matched
            results[order[reply[n] - 1]] = EnqueueResult(
                reply[n + 1].decode(), True, _STATES[reply[n + 2]]
            )
        where = self._where
        where.make_room(len(jobs))
        for queue, idxs in groups.items():
            for i in idxs:
                where[results[i].id] = queue
        return results
