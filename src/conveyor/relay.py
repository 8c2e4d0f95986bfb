"""The outbox relay: moves committed outbox rows to the broker, exactly once per row.

One batch: read the oldest rows (``ORDER BY created_at, id LIMIT batch``), push them to the
broker in one atomic ``enqueue`` with the row id as the job id, then delete the rows and commit.
A relay that dies between the push and the delete reads the same rows again; the broker refuses
ids it already holds (``DuplicateJob``, nothing stored), so the relay pushes that batch one job at
a time, skips the ones already there and deletes the rows: 0 lost, 0 duplicates (as long as a
pushed job is still in the broker, i.e. within its retention). Several relays (one per worker)
may run at once: the same guard makes their overlap harmless.

A row the broker refuses for good (``ValidationError`` / ``DecodeError``: a job it can never
store, such as a queue name its rules forbid) would block its batch forever. The relay then
pushes that batch one job at a time too, and moves each refused row to ``<table>_failed``
(``failed_ddl``: the row plus ``error`` and ``failed_at``; created on first need) in the same
transaction that deletes the batch's rows: it leaves the loop, is counted (``Relay.failed``),
logged at ERROR, and stays visible to operators; the other rows go on. A broker that is down
(``BrokerUnavailable``) is not a refusal: the whole batch is retried with backoff.

Run it with ``conveyor relay APP`` (cli/relay_cmd.py) or inside every worker of the app
(``Outbox(app, url, relay_in_worker=True)``: ``RelayInWorker``). docs/transactions.md.
"""

from __future__ import annotations

import importlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .core.job import Job
from .core.serialization import decode_job
from .errors import DecodeError, DuplicateJob, ValidationError
from .middleware import Middleware, WorkerView
from .outbox import Outbox, failed_ddl
from .txn import placeholder

log = logging.getLogger("conveyor.relay")
#: Longest pause after a failed batch (database or broker down): retried with backoff.
MAX_BACKOFF = 5.0
#: What the broker raises for a job it can never store: the row leaves the outbox as failed.
REFUSED = (ValidationError, DecodeError)


def connect(url: str, busy_timeout: float = 30.0) -> Any:
    """A DB-API connection to the outbox's database: ``sqlite:///path`` or ``postgresql://``."""
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :].partition("?")[0]
        return sqlite3.connect(path, timeout=busy_timeout, check_same_thread=False)
    if url.startswith(("postgresql://", "postgres://")):
        psycopg = importlib.import_module("psycopg")  # the ``postgres`` extra
        return psycopg.connect(url)
    raise ValidationError("url", f"the relay reads sqlite:///path or postgresql://..., got {url!r}")


class Relay:
    """Relays one outbox's rows to its app's broker (see module docstring)."""

    def __init__(
        self,
        outbox: Outbox,
        url: str | None = None,
        *,
        batch: int | None = None,
        interval: float | None = None,
    ) -> None:
        self.outbox = outbox
        self.url = url or outbox.url
        # an explicit url wins; else the outbox's own connect function, else its url
        self._connect: Callable[[], Any] | None = None if url else outbox.connect
        if self._connect is None and not self.url:
            raise ValidationError(
                "url", "the relay needs the outbox's database: Outbox(app, url=...) or --db"
            )
        self.batch = int(batch or outbox.batch)
        if self.batch < 1:
            raise ValidationError("batch", "must be at least 1")
        self.interval = float(outbox.interval if interval is None else interval)
        self.relayed = 0  # rows moved (pushed or found already pushed) and deleted
        self.duplicates = 0  # rows whose job was already in the broker (an earlier crash)
        self.failed = 0  # rows the broker refused, moved to ``<table>_failed``
        self._conn: Any = None
        self._stop = threading.Event()

    def relay_once(self) -> int:
        """Move one batch; returns the number of rows it deleted (0: the outbox is empty)."""
        if self._conn is None:
            self._conn = self._connect() if self._connect else connect(self.url or "")
        try:
            n = self._batch(self._conn)
        except BaseException:
            self._abandon()  # a broken connection is reopened by the next batch
            raise
        self.relayed += n
        return n

    def _batch(self, conn: Any) -> int:
        table, p = self.outbox.table, placeholder(conn)
        cur = conn.cursor()
        cur.execute(
            f"SELECT id, payload, created_at FROM {table}"
            f" ORDER BY created_at, id LIMIT {self.batch}"
        )
        rows = cur.fetchall()
        conn.commit()  # end the read (PostgreSQL opened a transaction for it)
        if not rows:
            return 0
        jobs: list[Job] = []
        payloads: list[bytes] = []
        decoded: list[Any] = []  # the rows of ``jobs``
        refused: dict[str, str] = {}
        for row in rows:
            row_id, text, _ = row
            raw = text.encode() if isinstance(text, str) else bytes(text)
            try:
                jobs.append(decode_job(raw))
                payloads.append(raw)
                decoded.append(row)
            except DecodeError as exc:  # only a hand-edited row
                refused[row_id] = f"DecodeError: {exc}"
                log.error("outbox row %s is not a job (%s); moved to %s_failed", row_id, exc, table)
        if jobs:  # refusals come back by position: a hand-edited row may name another job id
            refused.update({decoded[n][0]: e for n, e in self._push(jobs, payloads).items()})
        if refused:
            self._move_failed(cur, p, [row for row in rows if row[0] in refused], refused)
        ids = [row[0] for row in rows]
        cur.execute(f"DELETE FROM {table} WHERE id IN ({', '.join([p] * len(ids))})", ids)
        conn.commit()
        self.failed += len(refused)
        return len(rows)

    def _push(self, jobs: Sequence[Job], payloads: Sequence[bytes]) -> dict[int, str]:
        """One atomic enqueue; after a crash some ids are taken, or the broker refuses a job:
        then one job at a time. Returns the refused jobs: position in ``jobs`` -> the error."""
        broker, now = self.outbox.app.broker, self.outbox.app.now()
        try:
            broker.enqueue(jobs, now, payloads)
            return {}
        except (DuplicateJob, *REFUSED):
            pass
        refused: dict[int, str] = {}
        for n, (job, payload) in enumerate(zip(jobs, payloads, strict=True)):
            try:
                broker.enqueue([job], now, [payload])
            except DuplicateJob:
                self.duplicates += 1
                log.info("outbox job %s was already relayed (an earlier relay stopped)", job.id)
            except REFUSED as exc:
                refused[n] = f"{type(exc).__name__}: {exc}"
                log.error(
                    "outbox row %s refused by the broker (%s); moved to %s_failed",
                    job.id,
                    exc,
                    self.outbox.table,
                )
        return refused

    def _move_failed(self, cur: Any, p: str, rows: Sequence[Any], errors: dict[str, str]) -> None:
        """Copy refused rows to ``<table>_failed`` (created if missing) in the batch's
        transaction: the delete that follows commits with it, so a row is never in neither."""
        failed = self.outbox.table + "_failed"
        for statement in failed_ddl(self.outbox.table):
            cur.execute(statement)
        now = self.outbox.app.now()
        ids = [row[0] for row in rows]  # an operator may have moved one back and left it here
        cur.execute(f"DELETE FROM {failed} WHERE id IN ({', '.join([p] * len(ids))})", ids)
        cur.executemany(
            f"INSERT INTO {failed} (id, created_at, payload, error, failed_at)"
            f" VALUES ({p}, {p}, {p}, {p}, {p})",
            [(row_id, created, text, errors[row_id], now) for row_id, text, created in rows],
        )

    def run(self) -> None:
        """Relay until ``stop``: full batches back to back, else every ``interval`` seconds.

        A failing batch (database or broker unavailable) is logged and retried with backoff.
        """
        failures = 0
        while not self._stop.is_set():
            try:
                n = self.relay_once()
                failures = 0
            except Exception:
                failures += 1
                log.exception("outbox relay: batch failed (attempt %d), retrying", failures)
                self._stop.wait(min(MAX_BACKOFF, self.interval * 2**failures))
                continue
            if n < self.batch:
                self._stop.wait(self.interval)
        self.close()

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch."""
        self._stop.set()

    def _abandon(self) -> None:
        """Roll the failed batch back now, then close. Closing alone is not enough: SQLite
        defers the close (and keeps the batch's write lock) while a statement of it lives,
        and the batch's cursor lives in the traceback being handled (the backoff wait)."""
        conn = self._conn
        if conn is not None:
            try:
                conn.rollback()
            except Exception:  # already broken: nothing left to roll back
                log.debug("outbox relay: rolling back the failed batch failed", exc_info=True)
        self.close()

    def close(self) -> None:
        """Close the database connection (the next batch reopens it)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: nothing to release
                log.debug("outbox relay: closing the connection failed", exc_info=True)


class RelayInWorker(Middleware):
    """Runs a relay thread for the life of each worker of the app (``relay_in_worker=True``)."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self._running: dict[int, tuple[Relay, threading.Thread]] = {}

    def on_worker_start(self, worker: WorkerView) -> None:
        """Start this worker's relay thread."""
        relay = Relay(self.outbox)
        thread = threading.Thread(target=relay.run, name="conveyor-relay", daemon=True)
        self._running[id(worker)] = (relay, thread)
        thread.start()

    def on_worker_stop(self, worker: WorkerView) -> None:
        """Stop it (the batch under way finishes: a row is deleted only after its push)."""
        relay, thread = self._running.pop(id(worker), (None, None))
        if relay is not None and thread is not None:
            relay.stop()
            thread.join(MAX_BACKOFF + 30.0)
