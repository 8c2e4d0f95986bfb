"""Time-ordered heaps of the memory broker: delayed jobs by run_at, leases by deadline.

Entries are never removed when a job changes (cancelled, completed, extended): they are checked
when they reach the top of the heap and dropped if stale (lazy deletion). An entry is live while
the ``live(job_id, at)`` predicate given by the broker holds — the job is still in that state
with that same time. Promotion, expiry and ``next_due`` therefore cost O(log n) per job moved,
never a scan of every job. Not thread-safe on its own: the broker's lock guards it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator


class TimeHeap:
    """A min-heap of ``(time, seq, job_id)`` with lazy deletion (see the module docstring)."""

    def __init__(self, live: Callable[[str, float], bool]) -> None:
        self._live = live
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def push(self, at: float, job_id: str) -> None:
        """Remember that ``job_id`` is due at ``at``."""
        heapq.heappush(self._heap, (at, next(self._seq), job_id))

    def pop_due(self, now: float) -> Iterator[str]:
        """Pop and yield the ids of live entries due at ``now`` (earliest first), lazily."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, job_id = heapq.heappop(heap)
            if self._live(job_id, at):
                yield job_id

    def next_time(self) -> float | None:
        """The earliest live time, dropping stale entries on top; None when empty."""
        heap = self._heap
        while heap:
            at, _, job_id = heap[0]
            if self._live(job_id, at):
                return at
            heapq.heappop(heap)
        return None
