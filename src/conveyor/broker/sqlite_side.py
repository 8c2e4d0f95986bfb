"""The side stores of ``SqliteBroker``: documents, named logs, the event stream, metric
counters, one class per ``broker.side`` protocol, each sharing the broker's ``SqliteStore``.
Every write is one ``SqliteStore._write`` transaction; every read one ``SqliteStore._read``
(never under a closing connection). Their housekeeping is ``SqliteStore._housekeep_side``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ..config import Retention
from .sqlite_store import SqliteStore, Tx


class _Part:
    """A side store sharing the broker's ``SqliteStore`` (its connections and transactions)."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def _write(self) -> AbstractContextManager[Tx]:
        return self._store._write()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._store._read(sql, params)

    @property
    def retention(self) -> Retention:
        """The broker's retention settings."""
        return self._store.retention


class SqliteDocs(_Part):
    """``DocStore`` on the ``docs`` table."""

    def put(
        self,
        collection: str,
        name: str,
        doc: Mapping[str, Any],
        now: float,
        ttl: float | None = None,
    ) -> None:
        """Create or replace a document (see ``Broker.doc_put``)."""
        with self._write() as tx:
            tx.conn.execute(
                "INSERT OR REPLACE INTO docs (collection, name, body, expires_at)"
                " VALUES (?, ?, ?, ?)",
                (collection, name, orjson.dumps(dict(doc)), None if ttl is None else now + ttl),
            )

    _LIVE_DOC = (
        "SELECT name, body FROM docs WHERE collection = ? AND (? IS NULL OR name = ?)"
        " AND (expires_at IS NULL OR expires_at > ?)"
    )

    def get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """One live document, or None."""
        rows = self._read(self._LIVE_DOC, (collection, name, name, now))
        return dict(orjson.loads(rows[0][1])) if rows else None

    def list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Every live document of a collection, by name."""
        rows = self._read(self._LIVE_DOC, (collection, None, None, now))
        return {name: dict(orjson.loads(body)) for name, body in rows}

    def delete(self, collection: str, name: str) -> bool:
        """Remove a document; True if it existed."""
        with self._write() as tx:
            sql = "DELETE FROM docs WHERE collection = ? AND name = ?"
            return int(tx.conn.execute(sql, (collection, name)).rowcount) > 0

    def update_if(
        self,
        collection: str,
        name: str,
        field: str,
        expected: Any,
        changes: Mapping[str, Any],
        now: float,
    ) -> bool:
        """Merge ``changes`` into a live document if ``doc[field] == expected`` (atomic)."""
        with self._write() as tx:
            row = tx.conn.execute(self._LIVE_DOC, (collection, name, name, now)).fetchone()
            doc = None if row is None else orjson.loads(row[1])
            if doc is None or doc.get(field) != expected:
                return False
            doc.update(orjson.loads(orjson.dumps(dict(changes))))
            tx.conn.execute(
                "UPDATE docs SET body = ? WHERE collection = ? AND name = ?",
                (orjson.dumps(doc), collection, name),
            )
            return True


class SqliteLogs(_Part):
    """``LogStore`` on the ``logs`` table."""

    def append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """Append entries to a named log, keeping the newest ``cap``."""
        with self._write() as tx:
            tx.conn.executemany(
                "INSERT INTO logs (name, body) VALUES (?, ?)",
                [(name, orjson.dumps(dict(e))) for e in entries],
            )
            tx.conn.execute(
                "DELETE FROM logs WHERE name = ? AND seq <= COALESCE((SELECT seq FROM"
                " logs WHERE name = ? ORDER BY seq DESC LIMIT 1 OFFSET ?), -1)",
                (name, name, max(cap, 0)),
            )

    def read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries of a log, newest first."""
        sql = "SELECT body FROM logs WHERE name = ? ORDER BY seq DESC LIMIT ?"
        return [dict(orjson.loads(b)) for (b,) in self._read(sql, (name, limit))]


class SqliteEvents(_Part):
    """``EventStore`` on the ``events`` table (job transitions are written by ``Tx``)."""

    def add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append non-job events (worker_up, worker_down, ...)."""
        with self._write() as tx:
            tx.events.extend(dict(e) for e in events)

    def read(self, after: str | None = None, limit: int = 100) -> tuple[list[dict[str, Any]], str]:
        """Events numbered after cursor ``after``, oldest first, and the cursor to resume at."""
        start = int(after) if after else 0
        out: list[dict[str, Any]] = []
        last = self._read("SELECT n FROM counts WHERE queue = '' AND state = 'event'")[0][0]
        floor = max(start, last - self.retention.events_max)  # older events were trimmed
        rows = self._read(
            "SELECT last, n, body FROM events WHERE last > ? ORDER BY last LIMIT ?",
            (floor, max(limit, 0)),
        )
        for row_last, n, body in rows:
            for number, event in enumerate(orjson.loads(body), row_last - n + 1):
                if number > floor and len(out) < limit:
                    out.append(dict(event, cursor=str(number)))
        return out, out[-1]["cursor"] if out else str(max(start, 0))


class SqliteCounters(_Part):
    """``CounterStore`` on the ``counters`` table."""

    def add(self, bucket: str, increments: Mapping[str, float], now: float, ttl: float) -> None:
        """Add to the counters of ``bucket`` and push its expiry to ``now + ttl``."""
        with self._write() as tx:
            row = tx.conn.execute(
                "SELECT body FROM counters WHERE bucket = ? AND expires_at > ?", (bucket, now)
            ).fetchone()
            values: dict[str, float] = {} if row is None else orjson.loads(row[0])
            for key, amount in increments.items():
                values[key] = values.get(key, 0.0) + amount
            tx.conn.execute(
                "INSERT OR REPLACE INTO counters (bucket, body, expires_at) VALUES (?, ?, ?)",
                (bucket, orjson.dumps(values), now + ttl),
            )

    def get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """The counters of each live bucket."""
        sql = "SELECT body FROM counters WHERE bucket = ? AND expires_at > ?"
        rows = {b: self._read(sql, (b, now)) for b in buckets}
        return {b: dict(orjson.loads(found[0][0])) for b, found in rows.items() if found}
