"""In-process side stores for the memory broker: documents, logs, events, counters.

One class per ``broker.side`` protocol, each holding its own data and sharing the broker's lock
(``MemoryBroker`` builds them in ``__init__``). Kept apart from ``memory.py`` so the
job-transition logic reads on its own.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import orjson


class MemoryDocs:
    """``DocStore``: documents with TTL, copied in and out."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._docs: dict[str, dict[str, tuple[dict[str, Any], float | None]]] = {}

    def put(
        self,
        collection: str,
        name: str,
        doc: Mapping[str, Any],
        now: float,
        ttl: float | None = None,
    ) -> None:
        """Store a copy of ``doc`` (expiring at ``now + ttl``)."""
        expires = None if ttl is None else now + ttl
        body = _as_json(doc)
        with self._lock:
            self._docs.setdefault(collection, {})[name] = (body, expires)

    def get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """A copy of a live document, or None."""
        with self._lock:
            item = self._docs.get(collection, {}).get(name)
            if item is None or (item[1] is not None and item[1] <= now):
                return None
            return copy.deepcopy(item[0])

    def list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Copies of every live document of a collection."""
        out = {}
        with self._lock:
            for name in [*self._docs.get(collection, {})]:
                doc = self.get(collection, name, now)
                if doc is not None:
                    out[name] = doc
        return out

    def delete(self, collection: str, name: str) -> bool:
        """Remove a document."""
        with self._lock:
            return self._docs.get(collection, {}).pop(name, None) is not None

    def update_if(
        self,
        collection: str,
        name: str,
        field: str,
        expected: Any,
        changes: Mapping[str, Any],
        now: float,
    ) -> bool:
        """Compare-and-merge on one field."""
        merged = _as_json(changes)
        with self._lock:
            item = self._docs.get(collection, {}).get(name)
            if item is None or (item[1] is not None and item[1] <= now):
                return False
            if item[0].get(field) != expected:
                return False
            item[0].update(merged)
            return True


def _as_json(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` as the other backends store it (JSON: a tuple becomes a list, NaN
    None); what JSON cannot hold raises orjson's ``TypeError``, as SQLite, Redis and PostgreSQL
    do, so code tried on the memory broker fails there too, not in production."""
    body: dict[str, Any] = orjson.loads(orjson.dumps(dict(doc)))
    return body


class MemoryLogs:
    """``LogStore``: bounded deques by name."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._logs: dict[str, deque[dict[str, Any]]] = {}

    def append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """Append to a bounded log."""
        with self._lock:
            log = self._logs.get(name)
            if log is None or log.maxlen != cap:
                log = deque(log or (), maxlen=cap)
                self._logs[name] = log
            log.extend(copy.deepcopy(dict(e)) for e in entries)

    def read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """Newest first."""
        with self._lock:
            log = self._logs.get(name, deque())
            return [copy.deepcopy(e) for e in list(log)[::-1][:limit]]


class MemoryEvents:
    """``EventStore``: a numbered ring buffer of ``events_max`` events."""

    def __init__(self, lock: threading.RLock, events_max: int) -> None:
        self._lock = lock
        self._events: deque[tuple[int, dict[str, Any]]] = deque(maxlen=events_max)
        self._seq = 0

    def emit(self, event: Mapping[str, Any]) -> None:
        """Append one event (the caller holds the lock: job transitions emit while changing)."""
        self._seq += 1
        self._events.append((self._seq, dict(event)))

    def add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append non-transition events."""
        with self._lock:
            for event in events:
                self.emit(event)

    def read(self, after: str | None = None, limit: int = 100) -> tuple[list[dict[str, Any]], str]:
        """Events with sequence > ``after``."""
        start = int(after) if after else 0
        with self._lock:
            out = [(seq, e) for seq, e in self._events if seq > start][:limit]
        cursor = str(out[-1][0]) if out else str(max(start, 0))
        return [dict(e, cursor=str(seq)) for seq, e in out], cursor


class MemoryCounters:
    """``CounterStore``: buckets of floats with an expiry."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._buckets: dict[str, tuple[dict[str, float], float]] = {}

    def add(self, bucket: str, increments: Mapping[str, float], now: float, ttl: float) -> None:
        """Add to a counter bucket and push its expiry."""
        with self._lock:
            values, _ = self._buckets.get(bucket, ({}, 0.0))
            for key, amount in increments.items():
                values[key] = values.get(key, 0.0) + amount
            self._buckets[bucket] = (values, now + ttl)

    def get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """Live buckets only."""
        out = {}
        with self._lock:
            for bucket in buckets:
                item = self._buckets.get(bucket)
                if item is not None and item[1] > now:
                    out[bucket] = dict(item[0])
        return out
