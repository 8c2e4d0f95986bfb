"""PostgresBroker: the Broker protocol on PostgreSQL (``postgresql://user@host/db``).

One row of ``jobs`` per job, the same layout as the SQLite backend: the v1 envelope in
``payload`` plus the columns claim, retention and search use. Each transition is one
transaction: lock the rows (``FOR UPDATE``; ``SKIP LOCKED`` where other workers compete),
decode, apply the pure ``core.lifecycle`` function, write back. The claim selects, locks and
leases its rows in ONE statement (``UPDATE … WHERE rid IN (SELECT … FOR UPDATE SKIP LOCKED
LIMIT n) RETURNING``); the envelope is then patched in the same transaction. Enqueue can also run
on the caller's own psycopg connection, inside their transaction (``enqueue_in_transaction``).
Schema, queries, NOTIFY and vacuum: docs/architecture-postgres.md.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Self

import psycopg

from ...config import Retention
from ...core import lifecycle
from ...core.job import ErrorKind, Job
from ...core.state import TERMINAL_STATES, JobState
from ...errors import LeaseLost, ValidationError
from ..base import Ack, Broker, Claimed, EnqueueResult, Lease
from ..sqlflow import SqlWorkflows
from ..sqlite_rows import Rec
from ..sqllimits import SqlFlowAdmin
from . import flow as pgflow  # issue 15/16 hooks (postgres/flow.py)
from .admin import PgJobAdmin
from .enqueue import enqueue_on, insert_jobs
from .reads import COLS, PgReads
from .side import PgCounters, PgDocs, PgEvents, PgLogs
from .store import Tx, one, parse_url
from .waits import PgWaits

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
#: A job becomes ready (NOTIFY its queue) when it reaches one of these states.
_WAKES = (JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_SAVE = (
    "UPDATE {S}.jobs SET state = %s, seq = CASE WHEN %s THEN nextval('{S}.job_seq') ELSE seq"
    " END, run_at = %s, due_at = %s, lease_at = %s, token = %s, finished_at = %s,"
    " last_error = %s, payload = %s, corrupt = COALESCE(corrupt, %s) WHERE rid = %s"
)
#: The claim: pick, lock and lease up to n ready rows of one queue in one statement. The row
#: keeps its old state in RETURNING (``'pending'``) so ``Rec`` checks it against the envelope.
_CLAIM = (
    "WITH picked AS (SELECT rid, seq FROM {S}.jobs WHERE queue = %s AND state = 'pending'"
    " AND grp IS NULL ORDER BY priority, seq LIMIT %s FOR UPDATE SKIP LOCKED)"
    " UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s"
    " FROM picked WHERE j.rid = picked.rid RETURNING j.rid, j.id, j.queue, j.task,"
    " 'pending', j.priority, j.run_at, j.created_at, j.finished_at, j.last_error, j.payload,"
    " picked.seq"
)
_NEXT_DUE = (
    "SELECT (SELECT min(due_at) FROM {S}.jobs WHERE due_at IS NOT NULL),"
    " (SELECT min(lease_at) FROM {S}.jobs WHERE lease_at IS NOT NULL)"
)


class PostgresBroker(PgReads, PgWaits, PgJobAdmin, SqlWorkflows, SqlFlowAdmin, Broker):
    """The Broker protocol on one PostgreSQL schema (see module docstring)."""

    supports_flow = True  # rate limits, concurrency, fair groups (issue 15; postgres/flow.py)

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
        super().__init__(
            conninfo, retention, schema=schema, migrate=migrate, pool_size=pool_size, url=url
        )
        self.docs, self.logs = PgDocs(self), PgLogs(self)  # side stores: composed parts
        self.events, self.counters = PgEvents(self), PgCounters(self)

    @classmethod
    def from_url(cls, url: str, retention: Retention | None = None) -> Self:
        """``postgresql://user:pass@host:port/db`` with options ``?schema=conveyor``,
        ``?migrate=true`` (migrate an older schema at start-up), ``?pool_size=10``; any other
        query parameter goes to libpq (``sslmode``, ``connect_timeout``, ...)."""
        conninfo, opts = parse_url(url)
        migrate = opts.get("migrate", "false").lower()
        if migrate not in ("true", "false", "1", "0", "yes", "no"):
            raise ValidationError("url", f"migrate={migrate!r}: use true or false")
        try:
            pool_size = int(opts.get("pool_size", "10"))
        except ValueError:
            raise ValidationError("url", "pool_size must be an integer") from None
        return cls(
            conninfo,
            retention,
            schema=opts.get("schema", "conveyor"),
            migrate=migrate in ("true", "1", "yes"),
            pool_size=pool_size,
            url=url,
        )

    # ------------------------------------------------------------------ rows
    def _db(self, tx: Tx) -> pgflow.PgDb:
        """The shared workflow and flow-control SQL bound to ``tx`` (broker/sqldb.py)."""
        return pgflow.PgDb(self, tx)

    def _rows(self, tx: Tx, where: str, params: Sequence[Any], lock: str = "") -> list[Rec]:
        sql = self.sql(f"SELECT {COLS} FROM {{S}}.jobs WHERE {where} {lock}")
        return [Rec(tuple(row), True) for row in tx.conn.execute(sql, params)]

    def _leased(self, tx: Tx, job_id: str, token: str) -> Rec | None:
        recs = self._rows(
            tx, "id = %s AND state = 'active' AND token = %s", (job_id, token), "FOR UPDATE"
        )
        return recs[0] if recs else None

    def _save(self, tx: Tx, rec: Rec, token: str | None = None, placed: bool = True) -> None:
        """Write a job back; ``placed`` gives it the next sequence number (its new place)."""
        job, state = rec.job, rec.job.state
        tx.conn.execute(
            self.sql(_SAVE),
            (
                str(state),
                placed,
                job.run_at,
                job.run_at if state in _DELAYED else None,
                job.lease_expires_at if state is JobState.ACTIVE else None,
                token,
                job.finished_at if state in TERMINAL_STATES else None,
                # text cannot hold NUL; the envelope in ``payload`` keeps the exact error
                job.last_error.replace("\x00", "\ufffd") if job.last_error else job.last_error,
                rec.payload(),
                rec.corrupt,
                rec.rid,
            ),
        )
        tx.count(job.queue, rec.state, str(state))
        if job.flow is not None:  # issue 15: group and slot bookkeeping of grouped jobs
            pgflow.on_save(self, tx, job, rec.state)
        rec.state = str(state)
        if state in (JobState.COMPLETED, JobState.DEAD_LETTER):
            tx.finished.add((job.queue, str(state)))
        if state in TERMINAL_STATES:
            tx.done.add(job.queue)  # wakes the job's waiters (postgres/waits.py)
        if state in _WAKES:
            tx.notify.add(job.queue)

    # ------------------------------------------------------------------ producers
    def enqueue(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """Store all jobs or none, in one transaction; see ``Broker.enqueue``."""
        with self._write() as tx:
            return insert_jobs(self, tx, jobs, now, payloads)

    def enqueue_in_transaction(
        self,
        conn: psycopg.Connection[Any],
        jobs: Sequence[Job],
        now: float | None = None,
        payloads: Sequence[bytes] | None = None,
    ) -> list[EnqueueResult]:
        """Store jobs on the caller's psycopg connection, inside the caller's transaction.

        Rollback → no job; commit → the jobs become visible and the workers' NOTIFY fires
        (never before). Runs under a SAVEPOINT: a refused batch (``DuplicateJob``) rolls back
        only itself and the caller's transaction goes on. ``now`` defaults to the jobs'
        ``created_at`` (as on every backend); ``payloads``: the producer's encoded envelopes.
        Returns what ``enqueue`` returns (id, duplicate, state per job).
        """
        return enqueue_on(self, conn, jobs, now, payloads)

    def _txn_enqueue(
        self, conn: Any, jobs: Sequence[Job], payloads: Sequence[bytes], now: float, also: Any
    ) -> None:
        """A workflow's jobs and ``also`` (its graph) in the caller's transaction (sqlflow.py)."""
        enqueue_on(self, conn, jobs, now, payloads, also)

    # ------------------------------------------------------------------ consumers
    def claim(
        self,
        queues: Sequence[str],
        now: float,
        *,
        limit: int = 1,
        visibility_timeout: float = 30.0,
        worker_id: str = "",
        max_lost: int = 3,
    ) -> Claimed:
        """Lease up to ``limit`` ready jobs, queues in the given order, in one transaction.

        First, like the reaper, for every queue: due delayed jobs become pending and expired
        leases come back (``max_lost`` applies; rows another claimer holds are skipped). An
        empty claim reports ``next_due`` over all queues.
        """
        leases: list[Lease] = []
        self._drain_notifies()  # LISTEN before claiming: a NOTIFY after it wakes the next wait
        with self._write() as tx:
            self._promote(tx, now, 1000)
            self._expire(tx, now, max_lost, 1000)
            paused = {
                r[0] for r in tx.conn.execute(self.sql("SELECT name FROM {S}.queues WHERE paused"))
            }
            flowing = pgflow.flowing(self, tx)  # issue 15: any flow group at all (cheap gate)
            served = [q for q in queues if q not in paused]
            for queue in served:
                if flowing:  # issue 15: grouped jobs first (postgres/flow.py)
                    want = limit - len(leases)
                    leases += pgflow.take(self, tx, queue, now, want, visibility_timeout, worker_id)
                while len(leases) < limit:
                    got = self._claim_rows(tx, queue, limit - len(leases), now, visibility_timeout)
                    for rec in got:
                        lease = self._lease(tx, rec, now, visibility_timeout, worker_id)
                        if lease is not None:
                            leases.append(lease)
                    if not got:
                        break
            next_due = None if leases else self._next_due(tx)
            if not leases and flowing:  # issue 15: or when a throttled group is due
                next_due = pgflow.next_due(self, tx, now, next_due, served)
        return Claimed.of(leases, next_due)

    def _claim_rows(self, tx: Tx, queue: str, n: int, now: float, vt: float) -> list[Rec]:
        rows = tx.conn.execute(self.sql(_CLAIM), (queue, n, now + vt)).fetchall()
        rows.sort(key=lambda r: (r[5], r[11]))  # RETURNING has no order: priority, old seq
        recs = [Rec(tuple(r[:11]), True) for r in rows]
        tx.count(queue, "pending", "active", len(recs))
        for rec in recs:
            rec.state = "active"
        return recs

    def _next_due(self, tx: Tx) -> float | None:
        row = one(tx.conn.execute(self.sql(_NEXT_DUE)))
        times = [float(t) for t in row if t is not None]
        return min(times) if times else None

    def _lease(
        self, tx: Tx, rec: Rec, now: float, visibility_timeout: float, worker_id: str
    ) -> Lease | None:
        """Lease one claimed row; an undecodable one is dead-lettered (``decode_error``)."""
        if pgflow.lapsed(self, tx, rec, now):  # issue 15: past expires_at -> expired
            return None
        lifecycle.claim(rec.job, now, visibility_timeout, worker_id)
        if rec.corrupt is None:
            token = secrets.token_hex(12)
            try:
                self._save(tx, rec, token, placed=False)
            except (TypeError, ValueError, RecursionError) as exc:  # cannot be re-encoded
                rec.spoil(rec.row, rec.row[10], exc)
                rec.state = "active"
                lifecycle.claim(rec.job, now, visibility_timeout, worker_id)
            else:
                tx.emit("started", rec.job, now, attempt=rec.job.attempts, worker=worker_id)
                return Lease(rec.job, token, now + visibility_timeout)
        self._bury_corrupt(tx, rec, now, worker_id)
        return None

    def _bury_corrupt(self, tx: Tx, rec: Rec, now: float, worker_id: str) -> None:
        """An undecodable row: active → dead_letter with kind ``decode_error``; bytes kept."""
        error = {
            "kind": str(ErrorKind.DECODE_ERROR),
            "type": "DecodeError",
            "traceback": "",
            "message": str(rec.job.metadata.get("decode_error")),
            "worker": worker_id or None,
            "at": now,
        }
        lifecycle.fail(rec.job, now, error, None)
        self._save(tx, rec)
        tx.emit("dead_lettered", rec.job, now, reason=str(ErrorKind.DECODE_ERROR))
        pgflow.done(self, tx, now, rec.job)  # issue 16

    def complete(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """Record each success, all in one transaction; False for stale tokens."""
        out: list[bool] = []
        with self._write() as tx:
            for ack in acks:
                rec = self._leased(tx, ack.job_id, ack.token)
                if rec is not None:
                    lifecycle.complete(rec.job, now, ack.result, ack.error)
                    self._save(tx, rec)
                    tx.emit("completed", rec.job, now, attempt=rec.job.attempts)
                    pgflow.done(self, tx, now, rec.job)  # issue 16: release dependants
                out.append(rec is not None)
        return out

    def fail(
        self,
        job_id: str,
        token: str,
        now: float,
        *,
        error: Mapping[str, Any],
        retry_at: float | None,
    ) -> JobState:
        """Record a failed attempt; retry at ``retry_at`` or dead-letter (None)."""
        with self._write() as tx:
            if (rec := self._leased(tx, job_id, token)) is None:
                raise LeaseLost(job_id)
            lifecycle.fail(rec.job, now, error, retry_at)
            self._save(tx, rec)
            job = rec.job
            tx.emit("failed", job, now, attempt=job.attempts, error=job.last_error)
            if retry_at is None:
                tx.emit("dead_lettered", job, now, reason=error.get("kind"))
                pgflow.done(self, tx, now, job)  # issue 16
            else:
                tx.emit("retry_scheduled", job, now, run_at=retry_at)
            return job.state

    def release(
        self,
        job_id: str,
        token: str,
        now: float,
        *,
        delay: float = 0.0,
        penalize: bool = True,
        note: str = "released",
    ) -> JobState:
        """Give the job back (pending now, or scheduled after ``delay``)."""
        with self._write() as tx:
            if (rec := self._leased(tx, job_id, token)) is None:
                raise LeaseLost(job_id)
            lifecycle.release(rec.job, now, delay, penalize, note)
            self._save(tx, rec)
            tx.emit("released", rec.job, now, note=note)
            return rec.job.state

    def cancel_running(
        self, job_id: str, token: str, now: float, *, note: str = "cancelled while running"
    ) -> JobState:
        """active → cancelled by the lease holder (fenced), in one transaction."""
        with self._write() as tx:
            if (rec := self._leased(tx, job_id, token)) is None:
                raise LeaseLost(job_id)
            lifecycle.cancel_running(rec.job, now, note)
            self._save(tx, rec)
            tx.emit("cancelled", rec.job, now, note=note)
            pgflow.done(self, tx, now, rec.job)  # issue 16
            return rec.job.state

    def extend(
        self, leases: Sequence[tuple[str, str]], now: float, visibility_timeout: float
    ) -> list[bool]:
        """Push lease deadlines, all in one transaction; False where the lease is lost."""
        out: list[bool] = []
        with self._write() as tx:
            for job_id, token in leases:
                rec = self._leased(tx, job_id, token)
                if rec is not None:
                    rec.job.lease_expires_at = now + visibility_timeout
                    self._save(tx, rec, token, placed=False)
                out.append(rec is not None)
        return out

    # ------------------------------------------------------------------ maintenance
    def promote_due(self, now: float, limit: int = 1000) -> int:
        """Move due delayed jobs to pending."""
        with self._write() as tx:
            return self._promote(tx, now, limit)

    def _promote(self, tx: Tx, now: float, limit: int) -> int:
        recs = self._rows(
            tx,
            "due_at <= %s ORDER BY due_at, seq LIMIT %s",
            (now, limit),
            "FOR UPDATE SKIP LOCKED",
        )
        for rec in recs:
            lifecycle.promote(rec.job)
            self._save(tx, rec)
        return len(recs)

    def reap_expired(self, now: float, *, max_lost: int = 3) -> int:
        """Return expired leases to pending (poison pills to dead letter), then housekeeping:
        completed / cancelled TTLs, expired keys, documents, counters and finished workflows'
        graph records."""
        from .maintenance import drop_expired_finished, fold_counts

        with self._write() as tx:
            reaped = self._expire(tx, now, max_lost, 100_000)
            drop_expired_finished(self, tx, now)
            fold_counts(self, tx)
            self._housekeep_side(tx, now)
            self.sweep_workflows(tx, now)  # issue 16: graphs whose jobs are all gone (sqlflow.py)
            return reaped

    def _expire(self, tx: Tx, now: float, max_lost: int, limit: int) -> int:
        """Expired leases → pending (``lost += 1``), the ``max_lost``-th loss → dead letter."""
        recs = self._rows(
            tx,
            "lease_at <= %s AND state = 'active' ORDER BY lease_at, seq LIMIT %s",
            (now, limit),
            "FOR UPDATE SKIP LOCKED",
        )
        for rec in recs:
            job, worker = rec.job, rec.job.worker_id
            lifecycle.expire(job, now, max_lost)
            self._save(tx, rec)
            tx.emit("lease_lost", job, now, worker=worker, lost=job.lost)
            if job.state is JobState.DEAD_LETTER:
                tx.emit("dead_lettered", job, now, reason="worker_lost")
                pgflow.done(self, tx, now, job)  # issue 16
        return len(recs)

    def _delete(self, tx: Tx, queue: str, state: str, where: str, params: Sequence[Any]) -> int:
        """Delete the ``queue`` / ``state`` jobs matching ``where``; keep ``counts`` in step."""
        n = int(tx.conn.execute(self.sql(f"DELETE FROM {{S}}.jobs WHERE {where}"), params).rowcount)
        tx.deltas[queue, state] = tx.deltas.get((queue, state), 0) - n
        if n and state not in ("completed", "dead_letter", "cancelled"):
            tx.done.add(queue)  # a waiter of a deleted job learns it is gone
        return n

    def close(self) -> None:
        """Close the pool, the listeners and the waiters' listener; later calls reopen, but the
        app's background writes (buffered metrics) see ``_closed`` and drop, as on Redis."""
        self._closed = True
        self._close_waits()
        super().close()
