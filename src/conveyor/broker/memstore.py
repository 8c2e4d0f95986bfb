"""In-process side stores for the memory broker: documents, logs, events, counters.

Kept apart from ``memory.py`` so the job-transition logic reads on its own. ``SideStore`` is not
thread-safe by itself; ``SideStoreMixin`` gives the broker its protocol methods, each taking the
broker's lock.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any


class SideStore:
    """Documents with TTL, bounded logs, the event ring buffer and counter buckets."""

    def __init__(self, events_max: int) -> None:
        self.docs: dict[str, dict[str, tuple[dict[str, Any], float | None]]] = {}
        self.logs: dict[str, deque[dict[str, Any]]] = {}
        self.events: deque[tuple[int, dict[str, Any]]] = deque(maxlen=events_max)
        self.event_seq = 0
        self.counters: dict[str, tuple[dict[str, float], float]] = {}

    def doc_put(
        self, collection: str, name: str, doc: Mapping[str, Any], now: float, ttl: float | None
    ) -> None:
        """Store a copy of ``doc`` (expiring at ``now + ttl``)."""
        expires = None if ttl is None else now + ttl
        self.docs.setdefault(collection, {})[name] = (copy.deepcopy(dict(doc)), expires)

    def doc_get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """A copy of a live document, or None."""
        item = self.docs.get(collection, {}).get(name)
        if item is None or (item[1] is not None and item[1] <= now):
            return None
        return copy.deepcopy(item[0])

    def doc_list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Copies of every live document of a collection."""
        out = {}
        for name in list(self.docs.get(collection, {})):
            doc = self.doc_get(collection, name, now)
            if doc is not None:
                out[name] = doc
        return out

    def doc_delete(self, collection: str, name: str) -> bool:
        """Remove a document."""
        return self.docs.get(collection, {}).pop(name, None) is not None

    def doc_update_if(
        self, collection: str, name: str, field: str, expected: Any,
        changes: Mapping[str, Any], now: float,
    ) -> bool:  # fmt: skip
        """Compare-and-merge on one field."""
        item = self.docs.get(collection, {}).get(name)
        if item is None or (item[1] is not None and item[1] <= now):
            return False
        if item[0].get(field) != expected:
            return False
        item[0].update(copy.deepcopy(dict(changes)))
        return True

    def log_append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """Append to a bounded log."""
        log = self.logs.get(name)
        if log is None or log.maxlen != cap:
            log = deque(log or (), maxlen=cap)
            self.logs[name] = log
        log.extend(copy.deepcopy(dict(e)) for e in entries)

    def log_read(self, name: str, limit: int) -> list[dict[str, Any]]:
        """Newest first."""
        log = self.logs.get(name, deque())
        return [copy.deepcopy(e) for e in list(log)[::-1][:limit]]

    def emit(self, event: Mapping[str, Any]) -> None:
        """Append one event to the ring buffer."""
        self.event_seq += 1
        self.events.append((self.event_seq, dict(event)))

    def events_read(self, after: str | None, limit: int) -> tuple[list[dict[str, Any]], str]:
        """Events with sequence > ``after``."""
        start = int(after) if after else 0
        out = [(seq, e) for seq, e in self.events if seq > start][:limit]
        cursor = str(out[-1][0]) if out else str(max(start, 0))
        return [dict(e, cursor=str(seq)) for seq, e in out], cursor

    def counters_add(
        self, bucket: str, increments: Mapping[str, float], now: float, ttl: float
    ) -> None:
        """Add to a counter bucket and push its expiry."""
        values, _ = self.counters.get(bucket, ({}, 0.0))
        for key, amount in increments.items():
            values[key] = values.get(key, 0.0) + amount
        self.counters[bucket] = (values, now + ttl)

    def counters_get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """Live buckets only."""
        out = {}
        for bucket in buckets:
            item = self.counters.get(bucket)
            if item is not None and item[1] > now:
                out[bucket] = dict(item[0])
        return out


class SideStoreMixin:
    """The Broker side-store methods, delegating to ``self._side`` under ``self._lock``."""

    _lock: threading.RLock
    _side: SideStore

    def doc_put(self, collection: str, name: str, doc: Mapping[str, Any], now: float,
                ttl: float | None = None) -> None:  # fmt: skip
        """See Broker.doc_put."""
        with self._lock:
            self._side.doc_put(collection, name, doc, now, ttl)

    def doc_get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """See Broker.doc_get."""
        with self._lock:
            return self._side.doc_get(collection, name, now)

    def doc_list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """See Broker.doc_list."""
        with self._lock:
            return self._side.doc_list(collection, now)

    def doc_delete(self, collection: str, name: str) -> bool:
        """See Broker.doc_delete."""
        with self._lock:
            return self._side.doc_delete(collection, name)

    def doc_update_if(self, collection: str, name: str, field: str, expected: Any,
                      changes: Mapping[str, Any], now: float) -> bool:  # fmt: skip
        """See Broker.doc_update_if."""
        with self._lock:
            return self._side.doc_update_if(collection, name, field, expected, changes, now)

    def log_append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """See Broker.log_append."""
        with self._lock:
            self._side.log_append(name, entries, cap)

    def log_read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """See Broker.log_read."""
        with self._lock:
            return self._side.log_read(name, limit)

    def events_add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """See Broker.events_add."""
        with self._lock:
            for event in events:
                self._side.emit(event)

    def events_read(self, after: str | None = None, limit: int = 100
                    ) -> tuple[list[dict[str, Any]], str]:  # fmt: skip
        """See Broker.events_read."""
        with self._lock:
            return self._side.events_read(after, limit)

    def counters_add(self, bucket: str, increments: Mapping[str, float], now: float,
                     ttl: float) -> None:  # fmt: skip
        """See Broker.counters_add."""
        with self._lock:
            self._side.counters_add(bucket, increments, now, ttl)

    def counters_get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """See Broker.counters_get."""
        with self._lock:
            return self._side.counters_get(buckets, now)
