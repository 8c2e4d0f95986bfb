"""The non-job stores of ``SqliteBroker``: documents, named logs, the event stream, metric
counters, and their housekeeping. Every write is one ``SqliteStore._write`` transaction; every
read one ``SqliteStore._read`` (never under a closing connection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .sqlite_store import SqliteStore, Tx


class SqliteSideStores(SqliteStore):
    """Documents, logs, events and counters on the SQLite file (see ``Broker``)."""

    def _housekeep_side(self, tx: Tx, now: float) -> None:
        """Drop expired idempotency keys, documents and counter buckets; return free pages."""
        for table in ("idem", "docs", "counters"):
            tx.conn.execute(f"DELETE FROM {table} WHERE expires_at <= ?", (now,))
        free = tx.conn.execute("PRAGMA freelist_count").fetchone()[0]
        if free > 4096:  # keep 1024 free pages for reuse, give the rest back to the OS
            tx.conn.execute(f"PRAGMA incremental_vacuum({free - 1024})").fetchall()

    def doc_put(self, collection: str, name: str, doc: Mapping[str, Any], now: float,
                ttl: float | None = None) -> None:  # fmt: skip
        """Create or replace a document (see ``Broker.doc_put``)."""
        with self._write() as tx:
            tx.conn.execute("INSERT OR REPLACE INTO docs (collection, name, body, expires_at)"
                            " VALUES (?, ?, ?, ?)", (collection, name, orjson.dumps(dict(doc)),
                            None if ttl is None else now + ttl))  # fmt: skip

    _LIVE_DOC = ("SELECT name, body FROM docs WHERE collection = ? AND (? IS NULL OR name = ?)"
                 " AND (expires_at IS NULL OR expires_at > ?)")  # fmt: skip

    def doc_get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """One live document, or None."""
        rows = self._read(self._LIVE_DOC, (collection, name, name, now))
        return dict(orjson.loads(rows[0][1])) if rows else None

    def doc_list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Every live document of a collection, by name."""
        rows = self._read(self._LIVE_DOC, (collection, None, None, now))
        return {name: dict(orjson.loads(body)) for name, body in rows}

    def doc_delete(self, collection: str, name: str) -> bool:
        """Remove a document; True if it existed."""
        with self._write() as tx:
            sql = "DELETE FROM docs WHERE collection = ? AND name = ?"
            return int(tx.conn.execute(sql, (collection, name)).rowcount) > 0

    def doc_update_if(self, collection: str, name: str, field: str, expected: Any,
                      changes: Mapping[str, Any], now: float) -> bool:  # fmt: skip
        """Merge ``changes`` into a live document if ``doc[field] == expected`` (atomic)."""
        with self._write() as tx:
            row = tx.conn.execute(self._LIVE_DOC, (collection, name, name, now)).fetchone()
            doc = None if row is None else orjson.loads(row[1])
            if doc is None or doc.get(field) != expected:
                return False
            doc.update(orjson.loads(orjson.dumps(dict(changes))))
            tx.conn.execute("UPDATE docs SET body = ? WHERE collection = ? AND name = ?",
                            (orjson.dumps(doc), collection, name))  # fmt: skip
            return True

    def log_append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """Append entries to a named log, keeping the newest ``cap``."""
        with self._write() as tx:
            tx.conn.executemany("INSERT INTO logs (name, body) VALUES (?, ?)",
                                [(name, orjson.dumps(dict(e))) for e in entries])  # fmt: skip
            tx.conn.execute("DELETE FROM logs WHERE name = ? AND seq <= COALESCE((SELECT seq FROM"
                            " logs WHERE name = ? ORDER BY seq DESC LIMIT 1 OFFSET ?), -1)",
                            (name, name, max(cap, 0)))  # fmt: skip

    def log_read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries of a log, newest first."""
        sql = "SELECT body FROM logs WHERE name = ? ORDER BY seq DESC LIMIT ?"
        return [dict(orjson.loads(b)) for (b,) in self._read(sql, (name, limit))]

    def events_add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append non-job events (worker_up, worker_down, ...)."""
        with self._write() as tx:
            tx.events.extend(dict(e) for e in events)

    def events_read(self, after: str | None = None, limit: int = 100
                    ) -> tuple[list[dict[str, Any]], str]:  # fmt: skip
        """Events numbered after cursor ``after``, oldest first, and the cursor to resume at."""
        start = int(after) if after else 0
        out: list[dict[str, Any]] = []
        last = self._read("SELECT n FROM counts WHERE queue = '' AND state = 'event'")[0][0]
        floor = max(start, last - self.retention.events_max)  # older events were trimmed
        rows = self._read("SELECT last, n, body FROM events WHERE last > ? ORDER BY last LIMIT ?",
                          (floor, max(limit, 0)))  # fmt: skip
        for row_last, n, body in rows:
            for number, event in enumerate(orjson.loads(body), row_last - n + 1):
                if number > floor and len(out) < limit:
                    out.append(dict(event, cursor=str(number)))
        return out, out[-1]["cursor"] if out else str(max(start, 0))

    def counters_add(
        self, bucket: str, increments: Mapping[str, float], now: float, ttl: float
    ) -> None:
        """Add to the counters of ``bucket`` and push its expiry to ``now + ttl``."""
        with self._write() as tx:
            row = tx.conn.execute("SELECT body FROM counters WHERE bucket = ? AND expires_at > ?",
                                  (bucket, now)).fetchone()  # fmt: skip
            values: dict[str, float] = {} if row is None else orjson.loads(row[0])
            for key, amount in increments.items():
                values[key] = values.get(key, 0.0) + amount
            tx.conn.execute("INSERT OR REPLACE INTO counters (bucket, body, expires_at) VALUES"
                            " (?, ?, ?)", (bucket, orjson.dumps(values), now + ttl))  # fmt: skip

    def counters_get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """The counters of each live bucket."""
        sql = "SELECT body FROM counters WHERE bucket = ? AND expires_at > ?"
        rows = {b: self._read(sql, (b, now)) for b in buckets}
        return {b: dict(orjson.loads(found[0][0])) for b, found in rows.items() if found}

    def flush_all(self) -> None:
        """Delete every job, key, document, log, event and counter in the file."""
        with self._write() as tx:
            for table in ("jobs", "queues", "idem", "docs", "logs", "events", "counters"):
                tx.conn.execute(f"DELETE FROM {table}")
            tx.conn.execute("DELETE FROM counts WHERE queue != ''")
