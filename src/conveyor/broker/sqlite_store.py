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
from contextvars import ContextVar
from typing import Any, Self
from urllib.parse import parse_qs, unquote

import orjson

from ..config import Retention
from ..core.state import JobState
from ..errors import BrokerUnavailable, ConveyorError, StorageFull, ValidationError
from .ledger import Ledger
from .sqlite_schema import SchemaError, ensure_schema

EVENT_CHUNK = 500  # events per row of ``events``
EVENT_TRIM = 256  # trim old event rows when the event number crosses a multiple of this
#: Connections inherited across fork(): referenced forever so the child never closes them.
_ABANDONED: list[sqlite3.Connection] = []
#: Set by callers that only read or act on an existing system (the CLI's inspection commands):
#: a missing database file is then refused instead of created empty.
MUST_EXIST: ContextVar[bool] = ContextVar("conveyor_sqlite_must_exist", default=False)

_UPSERT = (
    "INSERT INTO counts (queue, state, n) VALUES {} ON CONFLICT (queue, state)"
    " DO UPDATE SET n = n + excluded.n"
)


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


class Tx(Ledger):
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


class _Slot:
    """One thread's connection and the lock held while it is in use (``close`` takes it too)."""

    __slots__ = ("closed", "conn", "lock", "thread")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn, self.lock, self.closed = conn, threading.RLock(), False
        self.thread = weakref.ref(threading.current_thread())


_FULL, _READONLY = sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY


def storage_error(path: str, exc: sqlite3.OperationalError) -> ConveyorError:
    """The Conveyor error for a refused write: ``StorageFull`` for a full disk or database and
    a read-only file (retrying at once cannot help), else ``BrokerUnavailable`` (locked, busy:
    transient)."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # primary result code
    text = str(exc)
    if code == _FULL or "full" in text:
        return StorageFull(f"SQLite {path}: the database or disk is full ({text})")
    if code == _READONLY or "readonly" in text:
        return StorageFull(f"SQLite {path} is read-only, writes are refused ({text})")
    return BrokerUnavailable(f"SQLite {path}: {text}")


class SqliteStore:
    """Connection management, schema, transactions, housekeeping of the side tables, flush."""

    def __init__(
        self,
        path: str,
        retention: Retention | None = None,
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 30.0,
        url: str | None = None,
    ) -> None:
        if not path or path == ":memory:" or path.startswith("file:"):
            raise ValidationError("url", "SQLite needs a file path; use memory:// for in-memory")
        self.synchronous = synchronous.upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValidationError("synchronous", "must be one of off, normal, full, extra")
        self.path = os.path.abspath(path)
        if MUST_EXIST.get() and not os.path.exists(self.path):
            raise ValidationError("url", f"no SQLite database at {self.path} (nothing was created)")
        self.retention = retention or Retention()
        self.busy_timeout = busy_timeout
        self.url = url or f"sqlite:///{self.path}"
        self._local = threading.local()
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._pid = os.getpid()
        self._gen = 0
        self._init_schema()

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
            for pragma in (
                f"busy_timeout = {int(self.busy_timeout * 1000)}",
                f"synchronous = {self.synchronous}",
                "cache_size = -16000",
                "temp_store = MEMORY",
                "journal_size_limit = 67108864",
                "wal_autocheckpoint = 4000",
            ):
                conn.execute(f"PRAGMA {pragma}")
        except sqlite3.Error as exc:
            raise BrokerUnavailable(f"cannot open SQLite database {self.path}: {exc}") from exc
        conn.create_function("cv_icontains", 2, _icontains, deterministic=True)
        conn.create_function("cv_text", 2, _text_match, deterministic=True)
        return conn

    def _slot(self) -> _Slot:
        """This thread's connection slot (reopened after fork or ``close``)."""
        local, pid = self._local, os.getpid()
        slot: _Slot | None = getattr(local, "slot", None)
        if slot is not None and local.pid == pid and local.gen == self._gen and not slot.closed:
            return slot
        if pid != self._pid:  # a forked child: abandon the parent's connections
            _ABANDONED.extend(s.conn for s in self._slots)
            self._slots, self._lock, self._pid = [], threading.Lock(), pid
        slot = _Slot(self._open())
        with self._lock:  # close the connections of threads that have exited
            for dead in [s for s in self._slots if s.thread() is None]:
                self._slots.remove(dead)
                dead.conn.close()
            self._slots.append(slot)
        local.slot, local.pid, local.gen = slot, pid, self._gen
        return slot

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, unguarded (tests and set-up; ``close`` may close it)."""
        return self._slot().conn

    def _acquire(self) -> _Slot:
        """This thread's slot with its lock held: ``close`` cannot close it until released."""
        while True:
            slot = self._slot()
            slot.lock.acquire()
            if not slot.closed:
                return slot
            slot.lock.release()  # closed between lookup and lock: reopen

    def _read(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        """Run one read statement outside any transaction; all its rows."""
        slot = self._acquire()
        try:
            return slot.conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise storage_error(self.path, exc) from exc
        finally:
            slot.lock.release()

    def _init_schema(self) -> None:
        conn, deadline = self._conn(), time.monotonic() + self.busy_timeout
        while True:  # a brand-new file may be locked by a sibling process setting it up
            try:
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only effective on a new file
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise storage_error(self.path, exc) from exc
                time.sleep(0.01)
        if str(mode).lower() != "wal":
            raise BrokerUnavailable(f"{self.path}: cannot switch to WAL mode (got {mode})")
        with self._write() as tx:
            try:
                ensure_schema(tx.conn, self.path)
            except SchemaError as exc:
                raise BrokerUnavailable(str(exc)) from exc

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        """A ``BEGIN IMMEDIATE`` transaction; commits on success, rolls back on any error."""
        slot = self._acquire()
        conn = slot.conn
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise storage_error(self.path, exc) from exc
            tx = Tx(conn)
            try:
                yield tx
                self._before_commit(tx)
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):  # full, read-only, locked
                    raise storage_error(self.path, exc) from exc
                raise
        finally:
            slot.lock.release()

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
            tx.conn.executemany(
                "INSERT INTO events (last, n, body) VALUES (?, ?, ?)",
                [
                    (first + i + len(chunk) - 1, len(chunk), orjson.dumps(chunk))
                    for i in range(0, len(events), EVENT_CHUNK)
                    for chunk in [events[i : i + EVENT_CHUNK]]
                ],
            )
            if (last - len(tx.events)) // EVENT_TRIM != last // EVENT_TRIM:  # amortised trim
                tx.conn.execute("DELETE FROM events WHERE last <= ?", (last - keep,))
        self._settle(tx)

    def close(self) -> None:
        """Close every connection this broker opened; later calls reopen lazily.

        A connection another thread is using (a transaction or a read in progress, e.g. the
        metrics flush timer's ``counters_add``) is closed only when that use ends: ``close``
        takes each connection's lock first, waiting at most the busy timeout (then the
        connection is abandoned, never closed under its user).
        """
        with self._lock:
            self._gen += 1
            slots, self._slots = self._slots, []
        if self._pid != os.getpid():
            _ABANDONED.extend(s.conn for s in slots)
            return
        for slot in slots:
            if not slot.lock.acquire(timeout=self.busy_timeout):
                slot.closed = True  # its user reopens on its next call
                _ABANDONED.append(slot.conn)
                continue
            try:
                slot.closed = True
                slot.conn.close()
            finally:
                slot.lock.release()

    @classmethod
    def from_url(cls, url: str, retention: Retention | None = None) -> Self:
        """``sqlite:///relative.db`` or ``sqlite:////abs/path.db``, option ``?synchronous=full``."""
        rest, _, query = url.split("://", 1)[-1].partition("?")
        opts = {k: v[-1] for k, v in parse_qs(query).items()}
        if not rest.startswith("/") or len(rest) < 2 or set(opts) - {"synchronous"}:
            raise ValidationError(
                "url",
                f"{url!r}: use sqlite:///relative.db or sqlite:////abs/"
                "path.db (option: ?synchronous=full)",
            )
        return cls(
            unquote(rest[1:]), retention, synchronous=opts.get("synchronous", "NORMAL"), url=url
        )

    def pause(self, queue: str) -> None:
        """Stop handing out jobs of ``queue`` (running jobs finish)."""
        with self._write() as tx:
            tx.conn.execute(
                "INSERT INTO queues (name, paused) VALUES (?, 1)"
                " ON CONFLICT (name) DO UPDATE SET paused = 1",
                (queue,),
            )

    def resume(self, queue: str) -> None:
        """Undo ``pause``."""
        with self._write() as tx:
            tx.conn.execute("UPDATE queues SET paused = 0 WHERE name = ?", (queue,))

    def paused_queues(self) -> set[str]:
        """Names of paused queues."""
        return {r[0] for r in self._read("SELECT name FROM queues WHERE paused = 1")}

    def queues(self) -> list[str]:
        """Every queue that has held a job or been paused, sorted."""
        return [r[0] for r in self._read("SELECT name FROM queues ORDER BY name")]

    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs per queue per state, from the ``counts`` table (no scan of ``jobs``)."""
        out = {
            r[0]: dict.fromkeys(map(str, JobState), 0)
            for r in self._read("SELECT name FROM queues")
        }
        for queue, state, n in self._read("SELECT queue, state, n FROM counts WHERE queue != ''"):
            out.setdefault(queue, dict.fromkeys(map(str, JobState), 0))[state] = n
        return out

    def _housekeep_side(self, tx: Tx, now: float) -> None:
        """Drop expired idempotency keys, documents and counter buckets; return free pages."""
        for table in ("idem", "docs", "counters"):
            tx.conn.execute(f"DELETE FROM {table} WHERE expires_at <= ?", (now,))
        free = tx.conn.execute("PRAGMA freelist_count").fetchone()[0]
        if free > 4096:  # keep 1024 free pages for reuse, give the rest back to the OS
            tx.conn.execute(f"PRAGMA incremental_vacuum({free - 1024})").fetchall()

    def flush_all(self) -> None:
        """Delete every job, key, document, log, event and counter in the file."""
        with self._write() as tx:
            for table in ("jobs", "queues", "idem", "docs", "logs", "events", "counters"):
                tx.conn.execute(f"DELETE FROM {table}")
            tx.conn.execute("DELETE FROM counts WHERE queue != ''")
