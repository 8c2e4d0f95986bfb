"""The side stores of ``PostgresBroker``: documents, named logs, the event stream, metric
counters, one class per ``broker.side`` protocol, each sharing the broker's ``PgStore``. Every
write is one transaction; compare-and-set and counter merges lock their row (``FOR UPDATE``),
so concurrent schedulers and workers never lose an update. Housekeeping:
``PgStore._housekeep_side``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ...config import Retention
from .store import PgStore, Tx, one


class _Part:
    """A side store sharing the broker's ``PgStore`` (its pool and transactions)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def _write(self) -> AbstractContextManager[Tx]:
        return self._store._write()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._store._read(sql, params)

    def _sql(self, text: str) -> str:
        return self._store.sql(text)

    @property
    def retention(self) -> Retention:
        """The broker's retention settings."""
        return self._store.retention


class PgDocs(_Part):
    """``DocStore`` on the ``docs`` table."""

    _LIVE_DOC = (
        "SELECT name, body FROM {S}.docs WHERE collection = %s"
        " AND (%s::text IS NULL OR name = %s) AND (expires_at IS NULL OR expires_at > %s)"
    )

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
                self._sql(
                    "INSERT INTO {S}.docs (collection, name, body, expires_at)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (collection, name) DO UPDATE"
                    " SET body = excluded.body, expires_at = excluded.expires_at"
                ),
                (collection, name, orjson.dumps(dict(doc)), None if ttl is None else now + ttl),
            )

    def get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """One live document, or None."""
        rows = self._read(self._LIVE_DOC, (collection, name, name, now))
        return dict(orjson.loads(rows[0][1])) if rows else None

    def list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Every live document of a collection, by name."""
        rows = self._read(self._LIVE_DOC + " ORDER BY name", (collection, None, None, now))
        return {name: dict(orjson.loads(body)) for name, body in rows}

    def delete(self, collection: str, name: str) -> bool:
        """Remove a document; True if it existed."""
        with self._write() as tx:
            sql = self._sql("DELETE FROM {S}.docs WHERE collection = %s AND name = %s")
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
        """Merge ``changes`` into a live document if ``doc[field] == expected`` (atomic: the
        row is locked, so of two schedulers racing on one tick exactly one wins)."""
        with self._write() as tx:
            row = tx.conn.execute(
                self._sql(self._LIVE_DOC + " FOR UPDATE"), (collection, name, name, now)
            ).fetchone()
            doc = None if row is None else orjson.loads(row[1])
            if doc is None or doc.get(field) != expected:
                return False
            doc.update(orjson.loads(orjson.dumps(dict(changes))))
            tx.conn.execute(
                self._sql("UPDATE {S}.docs SET body = %s WHERE collection = %s AND name = %s"),
                (orjson.dumps(doc), collection, name),
            )
            return True


class PgLogs(_Part):
    """``LogStore`` on the ``logs`` table."""

    def append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """Append entries to a named log, keeping the newest ``cap``."""
        with self._write() as tx, tx.conn.cursor() as cur:
            cur.executemany(
                self._sql("INSERT INTO {S}.logs (name, body) VALUES (%s, %s)"),
                [(name, orjson.dumps(dict(e))) for e in entries],
            )
            cur.execute(
                self._sql(
                    "DELETE FROM {S}.logs WHERE name = %s AND seq <= COALESCE((SELECT seq FROM"
                    " {S}.logs WHERE name = %s ORDER BY seq DESC LIMIT 1 OFFSET %s), -1)"
                ),
                (name, name, max(cap, 0)),
            )

    def read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries of a log, newest first."""
        sql = "SELECT body FROM {S}.logs WHERE name = %s ORDER BY seq DESC LIMIT %s"
        return [dict(orjson.loads(b)) for (b,) in self._read(sql, (name, max(limit, 0)))]


class PgEvents(_Part):
    """``EventStore`` on the ``events`` table (job transitions are written by ``Tx``)."""

    def add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append non-job events (worker_up, worker_down, ...)."""
        with self._write() as tx:
            tx.events.extend(dict(e) for e in events)

    def read(self, after: str | None = None, limit: int = 100) -> tuple[list[dict[str, Any]], str]:
        """Events numbered after cursor ``after``, oldest first, and the cursor to resume at."""
        start = int(after) if after else 0
        out: list[dict[str, Any]] = []
        last = self._read("SELECT n FROM {S}.meta WHERE key = 'event'")[0][0]
        floor = max(start, last - self.retention.events_max)  # older events were trimmed
        rows = self._read(
            "SELECT last, n, body FROM {S}.events WHERE last > %s ORDER BY last LIMIT %s",
            (floor, max(limit, 0)),
        )
        for row_last, n, body in rows:
            for number, event in enumerate(orjson.loads(body), row_last - n + 1):
                if number > floor and len(out) < limit:
                    out.append(dict(event, cursor=str(number)))
        return out, out[-1]["cursor"] if out else str(max(start, 0))


class PgCounters(_Part):
    """``CounterStore`` on the ``counters`` table."""

    def add(self, bucket: str, increments: Mapping[str, float], now: float, ttl: float) -> None:
        """Add to the counters of ``bucket`` and push its expiry to ``now + ttl``."""
        with self._write() as tx:
            c = tx.conn
            c.execute(  # make sure the row exists, then lock it: concurrent adds all count
                self._sql(
                    "INSERT INTO {S}.counters (bucket, body, expires_at) VALUES (%s, '{}', %s)"
                    " ON CONFLICT (bucket) DO NOTHING"
                ),
                (bucket, now + ttl),
            )
            row = one(
                c.execute(
                    self._sql(
                        "SELECT body, expires_at FROM {S}.counters WHERE bucket = %s FOR UPDATE"
                    ),
                    (bucket,),
                )
            )
            values: dict[str, float] = {} if row[1] <= now else orjson.loads(row[0])
            for key, amount in increments.items():
                values[key] = values.get(key, 0.0) + amount
            c.execute(
                self._sql("UPDATE {S}.counters SET body = %s, expires_at = %s WHERE bucket = %s"),
                (orjson.dumps(values), now + ttl, bucket),
            )

    def get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """The counters of each live bucket."""
        rows = self._read(
            "SELECT bucket, body FROM {S}.counters WHERE bucket = ANY(%s) AND expires_at > %s",
            (list(buckets), now),
        )
        return {b: dict(orjson.loads(body)) for b, body in rows}
