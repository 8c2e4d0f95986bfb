"""``BoundedCache``: the one bounded memo used on hot paths.

Several hot paths remember cheap-to-recompute facts: task and queue names that passed
validation, envelope templates per task, argument shapes per task, Redis keys per queue, the
queue of a job id. Each memo must never grow without bound (names come from callers, ids never
repeat), and a hit must cost no more than a dict lookup. ``BoundedCache`` is a ``dict`` (reads
are the C dict's) whose writes go through ``put``; when it is full it empties itself instead of
evicting one entry: no bookkeeping on a hit, and every entry can be recomputed on demand.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(dict[K, V]):
    """A dict of at most ``max_size`` entries, emptied when a new entry would not fit.

    Read it like a dict (``in``, ``get``, ``[key]``); write through ``put`` (or, before a batch
    of direct writes, ``make_room(n)``), never ``cache[key] = value``, which skips the bound.
    """

    __slots__ = ("max_size",)

    def __init__(self, max_size: int) -> None:
        super().__init__()
        if max_size < 1:
            raise ValueError(f"BoundedCache: max_size must be >= 1, got {max_size}")
        self.max_size = max_size

    def put(self, key: K, value: V) -> V:
        """Remember ``key -> value`` (emptying the cache first if it is full); return value."""
        if len(self) >= self.max_size and key not in self:
            self.clear()
        self[key] = value
        return value

    def make_room(self, n: int) -> None:
        """Empty the cache unless ``n`` more entries fit: call before ``n`` direct writes."""
        if len(self) + n > self.max_size:
            self.clear()
