"""SQLite plumbing for ``SqliteBroker``: connections, schema, transactions, queues, side stores.

One connection per thread, reopened after ``fork()`` (the child abandons, never closes, the
parent's connections: closing an inherited descriptor would drop the child's POSIX locks).
Every write is one ``BEGIN IMMEDIATE`` transaction (write lock up front: no upgrade deadlocks)
with a busy timeout; reads need no transaction (WAL readers never block the writer). Events are
stored one row per transaction, numbered by a global counter (the cursor). Job rows and
transitions live in ``sqlite.py``; schema and rationale in docs/architecture-sqlite.md.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Self
from urllib.parse import parse_qs, unquote

import orjson

from ..config import Retention
from ..core.job import Job
from ..core.state import JobState
from ..errors import BrokerUnavailable, ValidationError

SCHEMA_VERSION = 1
EVENT_CHUNK = 500  # events per row of ``events``
EVENT_TRIM = 256  # trim old event rows when the event number crosses a multiple of this
#: Connections inherited across fork(): referenced forever so the child never closes them.
_ABANDONED: list[sqlite3.Connection] = []

SCHEMA = """
CREATE TABLE jobs (rid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, queue TEXT NOT NULL,
  task TEXT NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL, seq INTEGER NOT NULL,
  run_at REAL NOT NULL, created_at REAL NOT NULL, finished_at REAL, due_at REAL, lease_at REAL,
  token TEXT, last_error TEXT, payload BLOB NOT NULL, corrupt BLOB);
CREATE INDEX jobs_ready ON jobs (queue, priority, seq, run_at) WHERE state = 'pending';
CREATE INDEX jobs_due ON jobs (due_at, seq) WHERE due_at IS NOT NULL;
CREATE INDEX jobs_finished ON jobs (queue, state, seq, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_created ON jobs (created_at, id);
CREATE INDEX jobs_state_created ON jobs (state, created_at, id);
CREATE INDEX jobs_queue_created ON jobs (queue, created_at, id);
CREATE INDEX jobs_task_created ON jobs (task, created_at, id);
CREATE TABLE counts (queue TEXT NOT NULL, state TEXT NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY (queue, state)) WITHOUT ROWID;
INSERT INTO counts (queue, state, n) VALUES ('', 'seq', 0), ('', 'event', 0);
CREATE TABLE queues (name TEXT PRIMARY KEY, paused INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE idem (queue TEXT NOT NULL, key TEXT NOT NULL, job_id TEXT NOT NULL,
  expires_at REAL NOT NULL, PRIMARY KEY (queue, key)) WITHOUT ROWID;
CREATE INDEX idem_expiry ON idem (expires_at);
CREATE TABLE docs (collection TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL,
  expires_at REAL, PRIMARY KEY (collection, name)) WITHOUT ROWID;
CREATE INDEX docs_expiry ON docs (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE logs (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, body BLOB);
CREATE INDEX logs_name ON logs (name, seq);
CREATE TABLE events (last INTEGER PRIMARY KEY, n INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE counters (bucket TEXT PRIMARY KEY, body BLOB NOT NULL, expires_at REAL NOT NULL)
  WITHOUT ROWID;
CREATE INDEX counters_expiry ON counters (expires_at)
"""
_UPSERT = ("INSERT INTO counts (queue, state, n) VALUES {} ON CONFLICT (queue, state)"
           " DO UPDATE SET n = n + excluded.n")  # fmt: skip


def _icontains(haystack: str | None, needle: str) -> bool:
    """SQL function ``cv_icontains``: case-insensitive substring, as ``str.lower`` folds."""
    return needle in (haystack or "").lower()


def _text_match(payload: bytes, needle: bytes) -> bool:
    """SQL function ``cv_text``: ``needle`` (lower-cased) inside the encoded args and kwargs."""
    try:
        data = orjson.loads(payload)
        return needle in orjson.dumps([data.get("args"), data.get("kwargs")]).lower()
    except (orjson.JSONDecodeError, TypeError, AttributeError):
        return False


class Tx:
    """One ``BEGIN IMMEDIATE`` transaction and what to settle before COMMIT: events, count
    deltas, finished (queue, state) pairs. The global counters ``seq`` and ``event`` are rows of
    ``counts`` under queue ``''`` (never a valid queue): one small page for all bookkeeping."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.events: list[dict[str, Any]] = []
        self.deltas: dict[tuple[str, str], int] = {}
        self.finished: set[tuple[str, str]] = set()
        self._meta: dict[str, int] | None = None

    def bump(self, key: str, by: int = 1) -> int:
        """Advance a global counter (``seq`` or ``event``) by ``by``; return the new value."""
        if self._meta is None:
            self._meta = dict(self.conn.execute("SELECT state, n FROM counts WHERE queue = ''"))
        self._meta[key] += by
        self.deltas["", key] = self.deltas.get(("", key), 0) + by
        return self._meta[key]

    def next_seq(self) -> int:
        """The next placement number: order of becoming ready / delayed / claimed / finished."""
        return self.bump("seq")

    def count(self, queue: str, old: str | None, new: str | None, n: int = 1) -> None:
        """Record ``n`` jobs moving between states (None: inserted / deleted) for ``counts``."""
        if old != new:
            for state, step in ((old, -n), (new, n)):
                if state is not None:
                    self.deltas[queue, state] = self.deltas.get((queue, state), 0) + step

    def emit(self, kind: str, job: Job, now: float, **extra: Any) -> None:
        """Queue one job event for insertion at commit."""
        self.events.append({"type": kind, "job_id": job.id, "queue": job.queue,
                            "task": job.task, "at": now, **extra})  # fmt: skip


class SqliteStore:
    """Connection management, schema, transactions, and the non-job stores of the protocol."""

    def __init__(
        self, path: str, retention: Retention | None = None, *, synchronous: str = "NORMAL",
        busy_timeout: float = 30.0, url: str | None = None,
    ) -> None:  # fmt: skip
        if not path or path == ":memory:" or path.startswith("file:"):
            raise ValidationError("url", "SQLite needs a file path; use memory:// for in-memory")
        self.synchronous = synchronous.upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValidationError("synchronous", "must be one of off, normal, full, extra")
        self.path = os.path.abspath(path)
        self.retention = retention or Retention()
        self.busy_timeout = busy_timeout
        self.url = url or f"sqlite:///{self.path}"
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[tuple[weakref.ref[threading.Thread], sqlite3.Connection]] = []
        self._pid = os.getpid()
        self._gen = 0
        self._init_schema()

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                   check_same_thread=False, cached_statements=256)  # fmt: skip
            for pragma in (f"busy_timeout = {int(self.busy_timeout * 1000)}",
                           f"synchronous = {self.synchronous}", "cache_size = -16000",
                           "temp_store = MEMORY", "journal_size_limit = 67108864",
                           "wal_autocheckpoint = 4000"):  # fmt: skip
                conn.execute(f"PRAGMA {pragma}")
        except sqlite3.Error as exc:
            raise BrokerUnavailable(f"cannot open SQLite database {self.path}: {exc}") from exc
        conn.create_function("cv_icontains", 2, _icontains, deterministic=True)
        conn.create_function("cv_text", 2, _text_match, deterministic=True)
        return conn

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (reopened after fork or ``close``)."""
        local, pid = self._local, os.getpid()
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == pid and local.gen == self._gen:
            return conn
        if pid != self._pid:  # a forked child: abandon the parent's connections
            _ABANDONED.extend(c for _, c in self._conns)
            self._conns, self._lock, self._pid = [], threading.Lock(), pid
        conn = self._open()
        with self._lock:  # close the connections of threads that have exited
            for item in [(t, c) for t, c in self._conns if t() is None]:
                self._conns.remove(item)
                item[1].close()
            self._conns.append((weakref.ref(threading.current_thread()), conn))
        local.conn, local.pid, local.gen = conn, pid, self._gen
        return conn

    def _init_schema(self) -> None:
        conn, deadline = self._conn(), time.monotonic() + self.busy_timeout
        while True:  # a brand-new file may be locked by a sibling process setting it up
            try:
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only effective on a new file
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        if str(mode).lower() != "wal":
            raise BrokerUnavailable(f"{self.path}: cannot switch to WAL mode (got {mode})")
        with self._write() as tx:
            version = tx.conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for statement in SCHEMA.split(";\n"):
                    tx.conn.execute(statement)
                tx.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise BrokerUnavailable(f"{self.path}: unknown schema version {version}")

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        """A ``BEGIN IMMEDIATE`` transaction; commits on success, rolls back on any error."""
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise BrokerUnavailable(f"SQLite {self.path}: {exc}") from exc
        tx = Tx(conn)
        try:
            yield tx
            self._before_commit(tx)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _settle(tx: Tx) -> None:
        """Apply every count delta of the transaction in one statement (RETURNING is slow)."""
        rows = [(q, s, d) for (q, s), d in tx.deltas.items() if d]
        tx.deltas.clear()
        for i in range(0, len(rows), 500):
            chunk = rows[i : i + 500]
            sql = _UPSERT.format(",".join(["(?, ?, ?)"] * len(chunk)))
            tx.conn.execute(sql, [v for row in chunk for v in row])

    def _before_commit(self, tx: Tx) -> None:
        """Write the transaction's events (at most ``events_max``), then every count delta."""
        keep = self.retention.events_max
        if tx.events:
            last = tx.bump("event", len(tx.events))
            events = tx.events[-keep:] if keep > 0 else []
            first = last - len(events) + 1
            tx.conn.executemany("INSERT INTO events (last, n, body) VALUES (?, ?, ?)", [
                (first + i + len(chunk) - 1, len(chunk), orjson.dumps(chunk))
                for i in range(0, len(events), EVENT_CHUNK)
                for chunk in [events[i : i + EVENT_CHUNK]]])  # fmt: skip
            if (last - len(tx.events)) // EVENT_TRIM != last // EVENT_TRIM:  # amortised trim
                tx.conn.execute("DELETE FROM events WHERE last <= ?", (last - keep,))
        self._settle(tx)

    def close(self) -> None:
        """Close every connection this broker opened; later calls reopen lazily."""
        with self._lock:
            self._gen += 1
            conns, self._conns = self._conns, []
        if self._pid != os.getpid():
            _ABANDONED.extend(c for _, c in conns)
            return
        for _, conn in conns:
            conn.close()

    @classmethod
    def from_url(cls, url: str, retention: Retention | None = None) -> Self:
        """``sqlite:///relative.db`` or ``sqlite:////abs/path.db``, option ``?synchronous=full``."""
        rest, _, query = url.split("://", 1)[-1].partition("?")
        opts = {k: v[-1] for k, v in parse_qs(query).items()}
        if not rest.startswith("/") or len(rest) < 2 or set(opts) - {"synchronous"}:
            raise ValidationError("url", f"{url!r}: use sqlite:///relative.db or sqlite:////abs/"
                                  "path.db (option: ?synchronous=full)")  # fmt: skip
        return cls(unquote(rest[1:]), retention, synchronous=opts.get("synchronous", "NORMAL"),
                   url=url)  # fmt: skip

    def pause(self, queue: str) -> None:
        """Stop handing out jobs of ``queue`` (running jobs finish)."""
        with self._write() as tx:
            tx.conn.execute("INSERT INTO queues (name, paused) VALUES (?, 1)"
                            " ON CONFLICT (name) DO UPDATE SET paused = 1", (queue,))  # fmt: skip

    def resume(self, queue: str) -> None:
        """Undo ``pause``."""
        with self._write() as tx:
            tx.conn.execute("UPDATE queues SET paused = 0 WHERE name = ?", (queue,))

    def paused_queues(self) -> set[str]:
        """Names of paused queues."""
        return {r[0] for r in self._conn().execute("SELECT name FROM queues WHERE paused = 1")}

    def queues(self) -> list[str]:
        """Every queue that has held a job or been paused, sorted."""
        return [r[0] for r in self._conn().execute("SELECT name FROM queues ORDER BY name")]

    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs per queue per state, from the ``counts`` table (no scan of ``jobs``)."""
        c = self._conn()
        out = {r[0]: dict.fromkeys(map(str, JobState), 0) for r in c.execute(
            "SELECT name FROM queues")}  # fmt: skip
        for queue, state, n in c.execute("SELECT queue, state, n FROM counts WHERE queue != ''"):
            out.setdefault(queue, dict.fromkeys(map(str, JobState), 0))[state] = n
        return out

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
        row = self._conn().execute(self._LIVE_DOC, (collection, name, name, now)).fetchone()
        return None if row is None else dict(orjson.loads(row[1]))

    def doc_list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Every live document of a collection, by name."""
        rows = self._conn().execute(self._LIVE_DOC, (collection, None, None, now)).fetchall()
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
        return [dict(orjson.loads(b)) for (b,) in self._conn().execute(sql, (name, limit))]

    def events_add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append non-job events (worker_up, worker_down, ...)."""
        with self._write() as tx:
            tx.events.extend(dict(e) for e in events)

    def events_read(self, after: str | None = None, limit: int = 100
                    ) -> tuple[list[dict[str, Any]], str]:  # fmt: skip
        """Events numbered after cursor ``after``, oldest first, and the cursor to resume at."""
        start = int(after) if after else 0
        out: list[dict[str, Any]] = []
        c = self._conn()
        last = c.execute("SELECT n FROM counts WHERE queue = '' AND state = 'event'").fetchone()[0]
        floor = max(start, last - self.retention.events_max)  # older events were trimmed
        rows = c.execute("SELECT last, n, body FROM events WHERE last > ? ORDER BY last LIMIT ?",
                         (floor, max(limit, 0))).fetchall()  # fmt: skip
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
        c = self._conn()
        rows = {b: c.execute(sql, (b, now)).fetchone() for b in buckets}
        return {b: dict(orjson.loads(row[0])) for b, row in rows.items() if row is not None}

    def flush_all(self) -> None:
        """Delete every job, key, document, log, event and counter in the file."""
        with self._write() as tx:
            for table in ("jobs", "queues", "idem", "docs", "logs", "events", "counters"):
                tx.conn.execute(f"DELETE FROM {table}")
            tx.conn.execute("DELETE FROM counts WHERE queue != ''")
