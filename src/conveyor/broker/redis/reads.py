"""Read side of the Redis broker: get, queues, counts, peek, search, oldest pending.

Counts are the ZCARDs of the per-state sets (no counters that could drift). ``get`` finds a job
by id through a per-process cache, else by looking in every registered queue (one pipeline).
``search`` lists candidate ids from the state sets (and, for pending, the flow groups), filters
on a few hash fields, sorts newest first and decodes only the requested page (full decode only
for the ``text`` filter).
"""

from __future__ import annotations

from ...core.job import Job, validate_queue_name
from ...core.state import JobState
from ..base import Page, SearchQuery
from ..filters import matches
from .codes import options
from .keys import STATE_SETS
from .plumbing import RedisBase, guarded
from .scripts import Call

OLDEST_SCAN_MAX = 1000
SEARCH_CHUNK = 5000  # jobs looked at per search.lua call (bounds each call's Redis time)
_STATES = list(JobState)
#: search.lua's name for the pending jobs waiting in flow groups (f:g:<group>, keys.py).
FLOW_SET = "flow"


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def member_id(member: bytes) -> str:
    """The job id of a ready-set member ``"<16 hex>:<id>"``, or ``"<16 hex>.<id>"`` for a fresh
    job (issue 18: lua/_lib.lua member_id); a bare id is tolerated."""
    text = member.decode()
    if len(text) > 17 and text[16] in ":." and all(c in "0123456789abcdef" for c in text[:16]):
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
            pipe.get(self.keys.flow(queue, "npend"))  # pending jobs waiting in flow groups
        replies = iter(pipe.execute())
        out: dict[str, dict[str, int]] = {}
        for queue in queues:
            counts = {str(s): int(next(replies)) for s in _STATES}
            counts["pending"] += max(0, int(next(replies) or 0))
            out[queue] = counts
        return out

    @guarded
    def peek(self, queue: str, n: int = 10) -> list[Job]:
        """The next ``n`` ready jobs in claim order, without claiming them."""
        if n <= 0:
            return []
        members = self.client.zrange(
            self.keys.queue_key(validate_queue_name(queue), "ready"), 0, n - 1
        )
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
        """Jobs matching every filter, newest first, one page (filtering runs in search.lua)."""
        queues = [query.queue] if query.queue else self.known_queues()
        states = [query.state] if query.state else _STATES
        plan = [(q, STATE_SETS[str(s)]) for q in queues for s in states]
        if JobState.PENDING in states:  # pending jobs held in flow groups (issue 15) too
            plan += [(q, FLOW_SET) for q in queues]
        if not plan:
            return Page([], 0, query.page, query.page_size)
        pipe = self.client.pipeline(transaction=False)
        for queue, suffix in plan:
            if suffix == FLOW_SET:
                pipe.get(self.keys.flow(queue, "npend"))
            else:
                pipe.zcard(self.keys.queue_key(queue, suffix))
        sizes = [max(0, int(size or 0)) for size in pipe.execute()]
        filters = {
            "prefix": query.id or "",
            "task": query.task or "",
            "since": _num(query.since),
            "until": _num(query.until),
            "error": (query.error or "").lower(),
            "text": (query.text or "").lower(),
        }
        chunks = [
            (q, suffix, start)
            for (q, suffix), size in zip(plan, sizes, strict=True)
            for start in range(0, int(size), SEARCH_CHUNK)
        ]
        calls = [
            Call(
                "search",
                self.qkeys(q),
                [options(set=suffix, offset=start, count=SEARCH_CHUNK, **filters)],
            )
            for q, suffix, start in chunks
        ]
        hits: list[tuple[float, str, str]] = []
        for (queue, _, _), reply in zip(chunks, self.runner.run_many(calls), strict=True):
            for n in range(1, len(reply), 2):
                hits.append((float(reply[n + 1]), reply[n].decode(), queue))
        if query.text:
            hits = self._exact_text(hits, query)
        hits.sort(reverse=True)
        start = (max(1, query.page) - 1) * query.page_size
        window = hits[start : start + query.page_size]
        hashes = self.fetch_many([(q, i) for _, i, q in window])
        items = [
            self.decode_lenient(h, q, i) for (_, i, q), h in zip(window, hashes, strict=True) if h
        ]
        return Page(items, len(hits), query.page, query.page_size)

    def _exact_text(
        self, hits: list[tuple[float, str, str]], query: SearchQuery
    ) -> list[tuple[float, str, str]]:
        """The text filter exactly as the memory broker applies it (args/kwargs only)."""
        hashes = self.fetch_many([(q, i) for _, i, q in hits])
        out = []
        for hit, fields in zip(hits, hashes, strict=True):
            if fields and matches(self.decode_lenient(fields, hit[2], hit[1]), query):
                out.append(hit)
        return out
