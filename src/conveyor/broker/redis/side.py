"""Side stores of the Redis broker: documents, bounded logs, events, counters.

One class per ``broker.side`` protocol (``RedisDocs``, ``RedisLogs``, ``RedisEvents``,
``RedisCounters``); ``RedisBroker`` builds one of each on its own plumbing (``_Part``).


* Documents are hashes (field -> JSON value, sorted keys) with meta fields ``"\\0"`` (always
  present) and ``"\\0exp"`` (logical expiry = ``now + ttl`` of the caller's clock); Redis drops
  the key ``ttl + 60`` s later in real time. ``doc_update_if`` is the ``doc_cas.lua`` script.
* Logs are lists (RPUSH + LTRIM in one MULTI).
* Events: every job transition is XADDed by its script to the queue's stream; ``events_add``
  writes the global stream. ``events_read`` merges all streams by entry id with a composite
  cursor ``"<stream>@<id>,..."`` (``*`` is the global stream, else the queue name).
* Counters are hashes (HINCRBYFLOAT) with a logical expiry field, like documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ...config import Retention
from . import fmtgate
from .codec import events_from_entry, fmt_time
from .codes import ScriptCode
from .keys import KeySchema
from .plumbing import RedisBase, guarded
from .scripts import ScriptRunner

_SORTED = orjson.OPT_SORT_KEYS
_PRESENT, _EXPIRES = b"\x00", b"\x00exp"
GRACE = 60.0
_GLOBAL = "*"


def _dump(value: Any) -> bytes:
    return orjson.dumps(value, option=_SORTED)


def _live(fields: Mapping[bytes, bytes], now: float) -> bool:
    if not fields:
        return False
    exp = fields.get(_EXPIRES)
    return exp is None or float(exp) > now


def _doc(fields: Mapping[bytes, bytes]) -> dict[str, Any]:
    return {k.decode(): orjson.loads(v) for k, v in fields.items() if not k.startswith(b"\x00")}


def _parse_cursor(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        name, sep, entry = item.rpartition("@")
        if sep and name:
            out[name] = entry
    return out


def _cursor(state: Mapping[str, str]) -> str:
    return ",".join(f"{name}@{entry}" for name, entry in sorted(state.items()))


def _entry_key(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.decode().partition("-")
    return int(ms), int(seq or 0)


class _Part:
    """A side store sharing the broker's plumbing (connection, key schema, scripts)."""

    def __init__(self, base: RedisBase) -> None:
        self._base = base

    @property
    def client(self) -> Any:
        """The broker's redis-py client."""
        return self._base.client

    @property
    def keys(self) -> KeySchema:
        """The broker's key schema."""
        return self._base.keys

    @property
    def runner(self) -> ScriptRunner:
        """The broker's script runner."""
        return self._base.runner

    @property
    def retention(self) -> Retention:
        """The broker's retention settings."""
        return self._base.retention

    def known_queues(self) -> list[str]:
        """Every registered queue, sorted."""
        return self._base.known_queues()


class RedisDocs(_Part):
    """``DocStore`` on Redis hashes."""

    @guarded
    def put(
        self,
        collection: str,
        name: str,
        doc: Mapping[str, Any],
        now: float,
        ttl: float | None = None,
    ) -> None:
        """Create or replace a document (expiring ``ttl`` s after ``now``)."""
        if collection == fmtgate.WORKER_DOCS and self._base.gate.due():
            # a worker of this version on a fresh deployment turns fresh members on before its
            # document makes the server look used (fmtgate.py)
            self._base.fresh_members()
        key = self.keys.doc(collection, name)
        mapping: dict[bytes | str, bytes | str] = {_PRESENT: b"1"}
        mapping.update({k: _dump(v) for k, v in doc.items()})
        if ttl is not None:
            mapping[_EXPIRES] = fmt_time(now + ttl)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=mapping)
        if ttl is not None:
            pipe.pexpire(key, max(1, int((ttl + GRACE) * 1000)))
        pipe.sadd(self.keys.doc_index(collection), name)
        pipe.execute()

    @guarded
    def get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """One live document, or None."""
        fields = self.client.hgetall(self.keys.doc(collection, name))
        return _doc(fields) if _live(fields, now) else None

    @guarded
    def list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Every live document of a collection (names of vanished keys are cleaned up)."""
        index = self.keys.doc_index(collection)
        names = sorted(n.decode() for n in self.client.smembers(index))
        if not names:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(self.keys.doc(collection, name))
        out, gone = {}, []
        for name, fields in zip(names, pipe.execute(), strict=True):
            if not fields:
                gone.append(name)
            elif _live(fields, now):
                out[name] = _doc(fields)
        if gone:
            self.client.srem(index, *gone)
        return out

    @guarded
    def delete(self, collection: str, name: str) -> bool:
        """Remove a document; True if it existed."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.keys.doc(collection, name))
        pipe.srem(self.keys.doc_index(collection), name)
        return bool(pipe.execute()[0])

    @guarded
    def update_if(
        self,
        collection: str,
        name: str,
        field: str,
        expected: Any,
        changes: Mapping[str, Any],
        now: float,
    ) -> bool:
        """Atomically merge ``changes`` if ``doc[field] == expected`` (doc_cas.lua)."""
        args: list[Any] = [fmt_time(now), field, _dump(expected)]
        for key, value in changes.items():
            args += [key, _dump(value)]
        reply = self.runner.run("doc_cas", [self.keys.doc(collection, name)], args)
        return bool(reply == ScriptCode.OK)


class RedisLogs(_Part):
    """``LogStore`` on Redis lists."""

    @guarded
    def append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """Append entries, keeping the newest ``cap``."""
        key = self.keys.log(name)
        pipe = self.client.pipeline(transaction=True)
        if entries:
            pipe.rpush(key, *[orjson.dumps(dict(e)) for e in entries])
        pipe.ltrim(key, -max(cap, 1), -1)
        pipe.execute()

    @guarded
    def read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries, newest first."""
        if limit <= 0:
            return []
        raw = self.client.lrange(self.keys.log(name), -limit, -1)
        return [orjson.loads(item) for item in reversed(raw)]


class RedisEvents(_Part):
    """``EventStore`` over the queues' streams and the global one."""

    @guarded
    def add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append non-transition events to the global stream."""
        if not events:
            return
        pipe = self.client.pipeline(transaction=False)
        for event in events:
            pipe.xadd(
                self.keys.events,
                {"event": orjson.dumps(dict(event), default=str)},
                maxlen=self.retention.events_max,
                approximate=True,
            )
        pipe.execute()

    @guarded
    def read(self, after: str | None = None, limit: int = 100) -> tuple[list[dict[str, Any]], str]:
        """Events after ``after``, oldest first, merged over every stream; and the next cursor.

        A cursor position is a stream entry id, or ``<entry id>/<k>`` when a read stopped at
        event ``k`` (from 0) of a batch entry (``codec.events_from_entry``).
        """
        state = _parse_cursor(after)
        names = [_GLOBAL, *self.known_queues()]
        keys = [
            self.keys.events if n == _GLOBAL else self.keys.queue_key(n, "events") for n in names
        ]
        pipe = self.client.pipeline(transaction=False)
        for name, key in zip(names, keys, strict=True):
            entry, inside, _ = state.get(name, "").partition("/")
            start = "-" if not entry else entry if inside else f"({entry}"
            pipe.xrange(key, min=start, max="+", count=max(1, limit))
        merged = []
        for name, entries in zip(names, pipe.execute(), strict=True):
            entry, inside, sub = state.get(name, "").partition("/")
            seen = int(sub) if inside and sub.isdigit() else -1
            queue = None if name == _GLOBAL else name
            for entry_id, fields in entries:
                eid = entry_id.decode()
                events = events_from_entry(fields, queue)
                last = len(events) - 1
                order = _entry_key(entry_id)
                for k, event in enumerate(events):
                    if k <= seen and eid == entry:
                        continue
                    merged.append((order, name, k, eid if k == last else f"{eid}/{k}", event))
        merged.sort(key=lambda item: (item[0], item[1], item[2]))
        out = []
        for _, name, _, position, event in merged[: max(0, limit)]:
            state[name] = position
            event["cursor"] = _cursor(state)
            out.append(event)
        return out, _cursor(state)


class RedisCounters(_Part):
    """``CounterStore`` on Redis hashes."""

    @guarded
    def add(self, bucket: str, increments: Mapping[str, float], now: float, ttl: float) -> None:
        """Add to the counters of a bucket and push its expiry to ``now + ttl``."""
        key = self.keys.counters(bucket)
        pipe = self.client.pipeline(transaction=True)
        for name, amount in increments.items():
            pipe.hincrbyfloat(key, name, float(amount))
        pipe.hset(key, _EXPIRES, fmt_time(now + ttl))
        pipe.pexpire(key, max(1, int((ttl + GRACE) * 1000)))
        pipe.execute()

    @guarded
    def get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """The counters of each live bucket."""
        if not buckets:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for bucket in buckets:
            pipe.hgetall(self.keys.counters(bucket))
        out = {}
        for bucket, fields in zip(buckets, pipe.execute(), strict=True):
            if _live(fields, now):
                out[bucket] = {
                    k.decode(): float(v) for k, v in fields.items() if not k.startswith(b"\x00")
                }
        return out
