"""PostgreSQL plumbing for ``PostgresBroker``: the pool, schema, transactions, queues, counts.

Connections come from a ``psycopg_pool.ConnectionPool`` (autocommit connections: a read is one
statement, a write one explicit transaction), rebuilt after ``fork()``. Every write is one
transaction (``Tx``): rows are locked as they are read (``FOR UPDATE``, ``SKIP LOCKED`` where
another worker may hold them), and at COMMIT the transaction's events get gap-free numbers from
the ``meta`` counter row and its count deltas are applied to ``counts`` (keys in sorted order:
no deadlock). NOTIFY wakes idle workers and is delivered only when the transaction commits.
Job rows and transitions live in ``broker.py``; schema and rationale in
docs/architecture-postgres.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import pq

from ...config import Retention
from ...core.state import JobState
from ...errors import BrokerUnavailable, ValidationError
from . import wire
from .schema import FLOW_TABLES, SchemaError, ensure_schema, quote_ident
from .tx import Tx as Tx  # re-exported: every module takes it from here

EVENT_CHUNK = 500  # events per row of ``events``
EVENT_TRIM = 256  # trim old event rows when the event number crosses a multiple of this
T = TypeVar("T")
_OPTIONS = {"schema", "migrate", "pool_size"}
#: How long a caller waits for a pooled connection while the server is known to be down.
DOWN_WAIT_S = 0.5


class PoolRetryFilter(logging.Filter):
    """Moves psycopg_pool's warning per failed reconnect attempt of a Conveyor pool (named
    ``conveyor-<schema>``) to DEBUG: Conveyor logs an outage once, and its end once with the
    retry count (``conveyor/outage.py``), instead of a line per retry. Other pools are untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Downgrade the record in place when it is one of ours; always keep it."""
        args = record.args if isinstance(record.args, tuple) else ()
        if (
            record.levelno == logging.WARNING
            and args
            and isinstance(args[0], str)
            and args[0].startswith("conveyor-")
            and str(record.msg).startswith(("error connecting in", "reconnection attempt in"))
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def done_lock_key(channel: str) -> int:
    """The advisory lock key (a signed 64-bit number) of a done channel."""
    digest = hashlib.blake2b(channel.encode(), digest_size=8, person=b"conveyor").digest()
    return int.from_bytes(digest, "big", signed=True)


def _quiet_pool_retries() -> None:
    """Install ``PoolRetryFilter`` on the ``psycopg.pool`` logger once per process."""
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, PoolRetryFilter) for f in pool_log.filters):
        pool_log.addFilter(PoolRetryFilter())


def one(cursor: psycopg.Cursor[Any]) -> Any:
    """The single row a statement must return (``fetchone`` that never yields None)."""
    row = cursor.fetchone()
    if row is None:
        raise BrokerUnavailable("PostgreSQL returned no row where one was expected")
    return row


def replanned(exc: psycopg.Error) -> bool:
    """True for the server refusing a prepared statement whose result columns changed (a
    migration under a running broker): 0A000 "cached plan must not change result type"."""
    return exc.sqlstate == "0A000" and "cached plan" in str(exc)


def _end(conn: psycopg.Connection[Any]) -> None:
    """A connection going back to the pool inside a transaction: the wire's statements
    forgotten and deallocated with the ROLLBACK (``wire.forget``); one mid-query (an
    interrupted read) is left to the pool, which discards it."""
    status = conn.pgconn.transaction_status
    if wire.forget(conn) and status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):
            conn.execute(wire.ROLLBACK_ALL)


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """Split a ``postgresql://`` URL into (libpq conninfo URL, Conveyor options)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    opts = {k: v for k, v in query if k in _OPTIONS}
    # quote, not quote_plus: libpq reads a "+" in a URL literally, so
    # ``options=-c%20lock_timeout%3D300`` must stay "%20", never become "-c+lock_timeout=300"
    rest = urlencode([(k, v) for k, v in query if k not in _OPTIONS], quote_via=quote)
    scheme = "postgresql" if parts.scheme.startswith("postgres") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, rest, "")), opts


class PgStore:
    """The pool, schema, transactions, counts and queues of ``PostgresBroker``."""

    has_server_clock = True
    #: flow groups seen by this process's last claim look-up or enqueued by it: the claim then
    #: skips sending its first statement speculatively with the look-up (``postgres/claim.py``)
    flow_seen = False

    def __init__(
        self,
        conninfo: str,
        retention: Retention | None = None,
        *,
        schema: str = "conveyor",
        migrate: bool = False,
        pool_size: int = 10,
        url: str | None = None,
    ) -> None:
        if not schema or len(schema) > 63:
            raise ValidationError("schema", "must be 1 to 63 characters")
        if pool_size < 1:
            raise ValidationError("pool_size", "must be at least 1")
        self.conninfo, self.schema, self.pool_size = conninfo, schema, pool_size
        self.s = quote_ident(schema)
        self.channel = f"conveyor_{schema}"[:63]
        self.done_channel = f"conveyor.done_{schema}"[:63]  # finished jobs (postgres/waits.py)
        #: the advisory lock a waiters' listener holds (shared) while it LISTENs: a settle
        #: statement notifies the done channel only when it cannot take it (postgres/waits.py)
        self.done_key = done_lock_key(self.done_channel)
        self.retention = retention or Retention()
        self.url = url or conninfo
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._pid = os.getpid()
        self._local = threading.local()
        self._listeners: list[psycopg.Connection[Any]] = []  # wait_for_work's, one per thread
        self._down = False  # a connection-level failure seen and no connection since
        #: bumped when the server refused an outdated prepared plan (0A000, ``replanned``: a
        #: column type changed under this process); a pooled connection marked older
        #: deallocates its statements at its next checkout (``_connection``), so one call
        #: meets one refusal, not one per pooled connection (more than the retry's attempts)
        self._plans = 0
        self._plan_marks: weakref.WeakKeyDictionary[psycopg.Connection[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
                ensure_schema(conn, schema, migrate=migrate, where=self._where())
        except SchemaError as exc:
            raise BrokerUnavailable(str(exc)) from exc
        except psycopg.Error as exc:
            raise BrokerUnavailable(f"PostgreSQL {self._where()}: {exc}") from exc

    def _where(self) -> str:
        parts = urlsplit(self.conninfo)
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"

    def sql(self, text: str) -> str:
        """``text`` with ``{S}`` bound to this broker's quoted schema."""
        return text.replace("{S}", self.s)

    # ------------------------------------------------------------------ connections
    def pool(self) -> psycopg_pool.ConnectionPool[Any]:
        """This process's pool (a forked child builds its own; the parent's is abandoned)."""
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pid = os.getpid()
                _quiet_pool_retries()
                self._pool = psycopg_pool.ConnectionPool(
                    self.conninfo,
                    min_size=1,
                    max_size=self.pool_size,
                    kwargs={"autocommit": True, "connect_timeout": 10},
                    timeout=5.0,  # fail fast while the server is down (BrokerUnavailable)
                    open=True,
                    name=f"conveyor-{self.schema}",
                )
            return self._pool

    def _failed(self, exc: Exception) -> BrokerUnavailable:
        """The Conveyor error for a connection-level failure; stale pool connections dropped.
        Until a connection works again, callers wait ``DOWN_WAIT_S`` for one, not 5 s."""
        state = getattr(exc, "sqlstate", None) or ""
        self._down = not state or state.startswith(("08", "57P"))  # no server, not a busy one
        # a lock conflict (40P01, 40001, 55P03) leaves the connections healthy: no check
        if self._down and isinstance(exc, psycopg.OperationalError) and self._pool is not None:
            with contextlib.suppress(Exception):  # the check must not mask the original error
                self._pool.check()
        return BrokerUnavailable(f"PostgreSQL {self._where()}: {exc}")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection: wait up to 5 s for one, or ``DOWN_WAIT_S`` while the server is
        known to be down (a probe, an enqueue in a web request fail fast during an outage)."""
        with self.pool().connection(timeout=DOWN_WAIT_S if self._down else None) as conn:
            self._down = False
            if self._plans and self._plan_marks.get(conn) != self._plans:
                self._fresh_plans(conn)
            try:
                yield conn
            finally:
                if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                    _end(conn)

    def _fresh_plans(self, conn: psycopg.Connection[Any]) -> None:
        """Deallocate every prepared statement of ``conn`` (idle, just checked out), once per
        ``_plans``: the wire's names are forgotten, and psycopg forgets its own when it sees
        the command's tag."""
        self._plan_marks[conn] = self._plans
        wire.forget(conn)
        conn.execute("DEALLOCATE ALL")

    def _replanned(self, exc: psycopg.Error) -> BrokerUnavailable:
        """The error for an outdated prepared plan (``replanned``), which the lock-conflict
        retry runs again (``retry.py``: 0A000); every pooled connection deallocates its
        statements before its next use (``_fresh_plans``)."""
        self._plans += 1
        return BrokerUnavailable(f"PostgreSQL {self._where()}: {exc}")

    def _read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        """Run one read statement (autocommit); all its rows. A plan outdated by a schema
        change (a statement psycopg prepared) is read again once, with fresh statements."""
        try:
            return self._read_once(sql, params)
        except psycopg.NotSupportedError as exc:
            if not replanned(exc):
                raise
            self._replanned(exc)
            return self._read_once(sql, params)

    def _read_once(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> list[Any]:
        try:
            with self._connection() as conn:
                rows: list[Any] = conn.execute(self.sql(sql), params).fetchall()
                return rows
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(exc) from exc

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        """One transaction; commits on success (events, counts and NOTIFY settled first)."""
        try:
            with self._connection() as conn:
                tx = Tx(conn, own=True)
                try:
                    yield tx
                    self._before_commit(tx)  # settles, then COMMIT (postgres/commit.py)
                except BaseException:
                    tx.rollback()
                    raise
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(exc) from exc
        except psycopg.NotSupportedError as exc:
            if not replanned(exc):
                raise
            # a schema change under the prepared statements: the transaction can run again
            # (``retry.py``: 0A000) once every pooled connection forgot them
            raise self._replanned(exc) from exc

    def in_tx(self, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in one ``_write`` transaction; its result."""
        with self._write() as tx:
            return fn(tx)

    # ------------------------------------------------------------------ commit bookkeeping
    def _before_commit(self, tx: Tx) -> None:
        """Events, count deltas, NOTIFYs and retention, then COMMIT: ``postgres/commit.py``."""
        from .commit import settle

        settle(self, tx)

    # ------------------------------------------------------------------ queues and counts
    def pause(self, queue: str) -> None:
        """Stop handing out jobs of ``queue`` (running jobs finish)."""
        with self._write() as tx:
            tx.conn.execute(
                self.sql(
                    "INSERT INTO {S}.queues (name, paused) VALUES (%s, true)"
                    " ON CONFLICT (name) DO UPDATE SET paused = true"
                ),
                (queue,),
            )

    def resume(self, queue: str) -> None:
        """Undo ``pause`` (and wake the idle workers of the queue)."""
        with self._write() as tx:
            tx.conn.execute(
                self.sql("UPDATE {S}.queues SET paused = false WHERE name = %s"), (queue,)
            )
            tx.notify.add(queue)

    def paused_queues(self) -> set[str]:
        """Names of paused queues."""
        return {r[0] for r in self._read("SELECT name FROM {S}.queues WHERE paused")}

    def queues(self) -> list[str]:
        """Every queue that has held a job or been paused, sorted."""
        return [r[0] for r in self._read("SELECT name FROM {S}.queues ORDER BY name")]

    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs per queue per state, from the ``counts`` table (no scan of ``jobs``)."""
        out = {
            r[0]: dict.fromkeys(map(str, JobState), 0)
            for r in self._read("SELECT name FROM {S}.queues")
        }
        for queue, state, n in self._read(
            "SELECT queue, state, sum(n)::bigint FROM (SELECT queue, state, n FROM {S}.counts"
            " UNION ALL SELECT queue, state, d FROM {S}.counts_log) t GROUP BY queue, state"
        ):
            out.setdefault(queue, dict.fromkeys(map(str, JobState), 0))[state] = int(n)
        return out

    def _housekeep_side(self, tx: Tx, now: float) -> None:
        """Drop expired idempotency keys, documents and counter buckets."""
        for table in ("idem", "docs", "counters"):
            tx.conn.execute(self.sql(f"DELETE FROM {{S}}.{table} WHERE expires_at <= %s"), (now,))

    def flush_all(self) -> None:
        """Delete every job, key, document, log, event and counter of the schema."""
        tables = ", ".join(
            f"{self.s}.{t}"
            for t in (
                "jobs",
                "queues",
                "idem",
                "docs",
                "logs",
                "events",
                "events_pending",
                "counters",
                "counts",
                "counts_log",
                *FLOW_TABLES,  # issue 15/16: workflows and flow control (postgres/flow.py)
            )
        )
        with self._write() as tx:
            tx.conn.execute(f"TRUNCATE {tables}")

    def server_time(self) -> float:
        """The server's clock (``clock_timestamp()``) in epoch seconds: the broker clock."""
        return float(self._read("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0])

    def close(self) -> None:
        """Close the pool and this thread's listener; later calls reopen lazily."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()
        with self._lock:
            listeners, self._listeners = self._listeners, []
            self._local = threading.local()
        for conn in listeners:
            with contextlib.suppress(Exception):  # a dead connection: nothing left to release
                conn.close()
