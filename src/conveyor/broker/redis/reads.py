"""Read side of the Redis broker: get, queues, counts, peek, search, oldest pending.

Counts are the ZCARDs of the per-state sets (no counters that could drift). ``get`` finds a job
by id through a per-process cache, else by looking in every registered queue (one pipeline).
``search`` lists candidate ids from the state sets, filters on a few hash fields, sorts newest
first and decodes only the requested page (full decode only for the ``text`` filter).
"""

from __future__ import annotations

from typing import Any

from ...core.job import Job, validate_queue_name
from ...core.state import JobState
from ..base import Page, SearchQuery
from ..memory import _matches
from .keys import STATE_SETS
from .plumbing import RedisBase, guarded

OLDEST_SCAN_MAX = 1000
_STATES = list(JobState)


def member_id(member: bytes) -> str:
    """The job id of a ready-set member ``"<16 hex>:<id>"`` (a bare id is tolerated)."""
    text = member.decode()
    if len(text) > 17 and text[16] == ":" and all(c in "0123456789abcdef" for c in text[:16]):
        return text[17:]
    return text


class ReadsMixin(RedisBase):
    """Inspection methods of ``RedisBroker``."""

    @guarded
    def get(self, job_id: str) -> Job | None:
        """A fresh snapshot of the job, or None."""
        found = self.fetch(job_id)
        if found is None:
            return None
        queue, fields = found
        return self.decode_lenient(fields, queue, job_id)

    @guarded
    def queues(self) -> list[str]:
        """Every registered queue, sorted."""
        return self.known_queues()

    @guarded
    def paused_queues(self) -> set[str]:
        """Queues whose paused flag exists."""
        queues = self.known_queues()
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.exists(self.keys.queue_key(queue, "paused"))
        return {q for q, flag in zip(queues, pipe.execute(), strict=True) if flag}

    @guarded
    def counts(self) -> dict[str, dict[str, int]]:
        """Per queue, the number of jobs in each state (ZCARD of each state set)."""
        queues = self.known_queues()
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            for state in _STATES:
                pipe.zcard(self.keys.state_set(queue, str(state)))
        replies = iter(pipe.execute())
        return {q: {str(s): int(next(replies)) for s in _STATES} for q in queues}

    @guarded
    def peek(self, queue: str, n: int = 10) -> list[Job]:
        """The next ``n`` ready jobs in claim order, without claiming them."""
        if n <= 0:
            return []
        members = self.client.zrange(self.keys.queue_key(validate_queue_name(queue), "ready"),
                                     0, n - 1)  # fmt: skip
        ids = [member_id(m) for m in members]
        hashes = self.fetch_many([(queue, i) for i in ids])
        return [self.decode_lenient(h, queue, i) for i, h in zip(ids, hashes, strict=True) if h]

    @guarded
    def oldest_pending(self, queue: str) -> float | None:
        """Ready time of the oldest pending job (exact up to 1,000 pending jobs)."""
        reply = self.runner.run("oldest", self.qkeys(queue), [OLDEST_SCAN_MAX])
        return None if reply is None else float(reply)

    @guarded
    def search(self, query: SearchQuery) -> Page:
        """Jobs matching every filter, newest first, one page."""
        candidates = self._candidates(query)
        pipe = self.client.pipeline(transaction=False)
        for queue, job_id in candidates:
            pipe.hmget(self.keys.job(queue, job_id), "created_at", "task", "last_error")
        hits: list[tuple[float, str, str]] = []
        needs_full: list[tuple[str, str]] = []
        for (queue, job_id), (created, task, error) in zip(candidates, pipe.execute(), strict=True):
            if created is None or task is None or query.text:
                needs_full.append((queue, job_id))
                continue
            if self._quick_match(query, float(created), task.decode(), error):
                hits.append((float(created), job_id, queue))
        if needs_full:
            for (queue, job_id), fields in zip(
                needs_full, self.fetch_many(needs_full), strict=True
            ):
                job = self.decode_lenient(fields, queue, job_id) if fields else None
                if job is not None and _matches(job, query):
                    hits.append((job.created_at, job_id, queue))
        hits.sort(reverse=True)
        start = (max(1, query.page) - 1) * query.page_size
        window = hits[start : start + query.page_size]
        hashes = self.fetch_many([(q, i) for _, i, q in window])
        items = [
            self.decode_lenient(h, q, i) for (_, i, q), h in zip(window, hashes, strict=True) if h
        ]
        return Page(items, len(hits), query.page, query.page_size)

    def _candidates(self, query: SearchQuery) -> list[tuple[str, str]]:
        queues = [query.queue] if query.queue else self.known_queues()
        states = [query.state] if query.state else _STATES
        plan = [(q, s) for q in queues for s in states]
        pipe = self.client.pipeline(transaction=False)
        for queue, state in plan:
            pipe.zrange(self.keys.state_set(queue, str(state)), 0, -1)
        out: list[tuple[str, str]] = []
        for (queue, state), members in zip(plan, pipe.execute(), strict=True):
            ready = STATE_SETS[str(state)] == "ready"
            for m in members:
                job_id = member_id(m) if ready else m.decode()
                if not query.id or job_id.startswith(query.id):
                    out.append((queue, job_id))
        return out

    @staticmethod
    def _quick_match(query: SearchQuery, created: float, task: str, error: Any) -> bool:
        if query.task and task != query.task:
            return False
        if query.since is not None and created < query.since:
            return False
        if query.until is not None and created >= query.until:
            return False
        if query.error:
            text = error.decode("utf-8", "replace") if error else ""
            if query.error.lower() not in text.lower():
                return False
        return True
