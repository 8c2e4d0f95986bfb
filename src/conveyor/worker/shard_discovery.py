"""The stored shards of the queues a worker serves, also when its process does not declare them.

``app.queue("events", shards=N)`` is declared by the processes that enqueue; a worker started
with ``queues=["events"]`` from an app that does not declare it (another service's worker,
``conveyor worker --queues events`` on an app module without the declaration) used to claim only
the unsharded name, so the jobs of every shard waited for ever. ``DiscoveringSelector`` serves
what ``app.dequeue`` and the operator's actions reach (``monitoring.admin.queue_members``): the
declared shards, any stored queue named as a shard of a served queue (shards of another shard
count, left by a re-sharding), then the name itself. The stored names are read again every
``SHARD_REFRESH`` seconds (one small broker read: the queue registry), so shards that appear
after the worker started are served within that time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..core.queues import QueueSelector
from ..core.shards import ShardedQueue, ShardedSelector, ShardMap, parse_shard

log = logging.getLogger("conveyor.worker")

#: Seconds between two reads of the stored queue names.
SHARD_REFRESH = 10.0


class DiscoveringSelector(ShardedSelector):
    """``ShardedSelector`` over the declared shards plus the stored ones of each served queue;
    a plain weighted round-robin while none of them has shards."""

    def __init__(
        self,
        queues: list[tuple[str, int]],
        strict: bool,
        declared: ShardMap,
        stored: Callable[[], Iterable[str]],
        now: Callable[[], float],
        every: float = SHARD_REFRESH,
    ) -> None:
        super().__init__(queues, strict, declared)
        self._declared, self._stored, self._now, self._every = declared, stored, now, every
        self._next: float | None = None  # the first claim reads the stored names
        self._failing = False
        self._found: dict[str, tuple[str, ...]] = {}

    def order(self) -> list[str]:
        """The physical queue order for the next claim (the stored names read when due)."""
        now = self._now()
        if self._next is None or not self._next - self._every <= now < self._next:
            self.refresh(now)  # due, or the clock went back
        if not self.shard_map:
            return QueueSelector.order(self)  # nothing sharded: the plain round-robin
        return super().order()

    def refresh(self, now: float) -> None:
        """Read the stored queue names and serve the shards found among them; on a broker
        error keep serving the current list (a claim reports the outage) and retry when due."""
        self._next = now + self._every
        try:
            stored = list(self._stored())
        except Exception:
            if not self._failing:
                log.warning("reading the stored queue names failed; retrying", exc_info=True)
            self._failing = True
            return
        self._failing = False
        found = self._shards_in(stored)
        if found != self._found:
            for name, shards in found.items():
                if shards != self._found.get(name):
                    log.info("queue %s: serving %d stored shard(s)", name, len(shards))
            self._found = found
        self._rebuild()

    def _shards_in(self, stored: list[str]) -> dict[str, tuple[str, ...]]:
        """Stored shard names of each served queue that are not declared here."""
        served = {name for name, _ in self.queues}
        found: dict[str, list[tuple[int, str]]] = {}
        for queue in stored:
            parsed = parse_shard(queue)
            if parsed is None or parsed[0] not in served:
                continue
            declared = self._declared.queues.get(parsed[0])
            if declared is None or queue not in declared.names:
                found.setdefault(parsed[0], []).append((parsed[1], queue))
        return {name: tuple(q for _, q in sorted(pairs)) for name, pairs in found.items()}

    def _rebuild(self) -> None:
        """The selector's shard map and physical names from the declared and found shards."""
        view = ShardMap()
        for name, _ in self.queues:
            declared = self._declared.queues.get(name)
            names = (declared.names if declared else ()) + self._found.get(name, ())
            if names:
                view.queues[name] = ShardedQueue(name, names)
        self.shard_map = view
        shards = [q for name, _ in self.queues for q in view.physical([name]) if q != name]
        self.names = shards + [name for name, _ in self.queues]
