"""PostgresBroker: the Broker protocol on PostgreSQL (``postgresql://user@host/db``).

One row of ``jobs`` per job, the same layout as the SQLite backend: the v1 envelope in
``payload`` plus the columns claim, retention and search use. Each transition is one
transaction: lock the rows (``FOR UPDATE``; ``SKIP LOCKED`` where other workers compete),
decode, apply the pure ``core.lifecycle`` function, write back. The claim selects, locks and
leases its rows in ONE statement that also writes the lease and fencing token into the row's
columns (``postgres/claim.py``; the envelope catches up at the next write: ``postgres/rec.py``),
and a batch of acks completes in two set-based statements (``postgres/finish.py``). Enqueue can
also run on the caller's own psycopg connection, inside their transaction
(``enqueue_in_transaction``). Every write the worker, the producer and the operator make in
the broker's own transaction (claim, complete, fail, release, cancel_running, extend, the
reaper, enqueue, a workflow's enqueue, debounce, operator actions, flow-limit overrides) runs
again when PostgreSQL rolled it back as the loser of a lock conflict: a deadlock, a
serialization failure, a lock timeout (``postgres/retry.py``). An enqueue on the caller's
connection never does: the caller's transaction is theirs to run again.
Schema, queries, NOTIFY and vacuum: docs/architecture-postgres.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import psycopg
import psycopg_pool

from ...config import Retention
from ...core import lifecycle
from ...core.job import Job
from ...core.state import TERMINAL_STATES, JobState
from ...errors import ValidationError
from ..base import Ack, Broker, Claimed, EnqueueResult
from ..sqlfinish import SqlLeaseTransitions
from ..sqlflow import SqlWorkflows
from ..sqlite_rows import Rec
from ..sqllimits import SqlFlowAdmin, free_held
from . import flow as pgflow  # issue 15/16 hooks (postgres/flow.py)
from .admin import PgJobAdmin
from .claim import claim_jobs
from .enqueue import duplicate, enqueue_alone, enqueue_on, insert_jobs
from .finish import complete_acks
from .reads import PgReads
from .rec import COLS, pg_rec
from .retry import Retry, retried, retry_transient
from .side import PgCounters, PgDocs, PgEvents, PgLogs
from .store import PgStore, Tx, parse_url, replanned
from .waits import PgWaits

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
#: A job becomes ready (NOTIFY its queue) when it reaches one of these states.
_WAKES = (JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_SAVE = (
    "UPDATE {S}.jobs SET state = %s, seq = CASE WHEN %s THEN nextval('{S}.job_seq') ELSE seq"
    " END, run_at = %s, due_at = %s, lease_at = %s, token = %s, finished_at = %s,"
    " last_error = %s, payload = %s, corrupt = COALESCE(corrupt, %s), claims = 0 WHERE rid = %s"
)


class PostgresBroker(
    PgReads, PgWaits, PgJobAdmin, SqlWorkflows, SqlFlowAdmin, SqlLeaseTransitions, Broker
):
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
        #: lock-conflict retries (postgres/retry.py); tests inject the random source and sleep
        self.retry = Retry()

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
        if any(isinstance(p, str) and "\x00" in p for p in params):
            return []  # text cannot hold NUL: no row has such an id (psycopg would raise)
        sql = self.sql(f"SELECT {COLS} FROM {{S}}.jobs WHERE {where} {lock}")
        return [pg_rec(row) for row in tx.conn.execute(sql, params)]

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
        elif rec.corrupt is not None and rec.state == "active" and state is not JobState.ACTIVE:
            free_held(pgflow.PgDb(self, tx), job.id)  # the slots it took before it went bad
        rec.state = str(state)
        if state in (JobState.COMPLETED, JobState.DEAD_LETTER):
            tx.finished.add((job.queue, str(state)))
        if state in TERMINAL_STATES:
            tx.done.add(job.queue)  # wakes the job's waiters (postgres/waits.py)
        if state in _WAKES:
            tx.notify.add(job.queue)

    # ------------------------------------------------------------------ producers
    @retry_transient  # one statement or one transaction of the broker's own: safe to run again
    def enqueue(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """Store all jobs or none, in one transaction; see ``Broker.enqueue``. The INSERT
        travels with BEGIN, the settle statement and COMMIT (one round trip), so a taken id
        surfaces at COMMIT: ``DuplicateJob``, nothing stored."""
        try:
            try:
                done = enqueue_alone(self, jobs, now, payloads)  # a plain batch: one statement
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                raise self._failed(exc) from exc
            except psycopg.NotSupportedError as exc:  # an autocommit statement: no rollback
                if not replanned(exc):
                    raise
                raise self._replanned(exc) from exc  # run again on fresh statements
            if done is not None:
                return done
            with self._write() as tx:
                return insert_jobs(self, tx, jobs, now, payloads, lazy=True)
        except psycopg.errors.UniqueViolation as exc:
            raise duplicate(exc, jobs[0].id if jobs else "") from None

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

    # the broker's own transactions, retried on a lock conflict (signatures are theirs);
    # ``enqueue_in_transaction`` and ``enqueue_workflow_in_transaction`` are never: the
    # conflict reaches the caller, whose transaction only the caller can run again
    enqueue_workflow = retried(SqlWorkflows.enqueue_workflow)
    replace_waiting = retried(SqlFlowAdmin.replace_waiting)  # debounce
    flow_set_limit = retried(SqlFlowAdmin.flow_set_limit)  # app.set_limit / clear_limit
    flow_status = retried(SqlFlowAdmin.flow_status)  # reads, in a transaction of its own
    pause = retried(PgStore.pause)
    resume = retried(PgStore.resume)

    def _txn_enqueue(
        self, conn: Any, jobs: Sequence[Job], payloads: Sequence[bytes], now: float, also: Any
    ) -> None:
        """A workflow's jobs and ``also`` (its graph) in the caller's transaction (sqlflow.py)."""
        enqueue_on(self, conn, jobs, now, payloads, also)

    # ------------------------------------------------------------------ consumers
    @retry_transient
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
        empty or short claim reports ``next_due`` over all queues (a short one is ``drained``).
        """
        self._drain_notifies()  # NOTIFYs already received: this claim sees their jobs
        got = claim_jobs(self, queues, now, limit, visibility_timeout, worker_id, max_lost)
        self._after_claim(len(got), limit, got.next_due)  # full: UNLISTEN until the next wait
        return got

    @retry_transient
    def complete(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """Record each success, all in one transaction (set-based: ``postgres/finish.py``);
        False for stale tokens."""
        return complete_acks(self, acks, now)

    # shared with SQLite (sqlfinish.py), retried on a lock conflict; the signatures are theirs
    fail = retried(SqlLeaseTransitions.fail)
    release = retried(SqlLeaseTransitions.release)
    cancel_running = retried(SqlLeaseTransitions.cancel_running)
    extend = retried(SqlLeaseTransitions.extend)  # rows locked in lease order

    def _flow_done(self, tx: Tx, now: float, job: Job) -> None:
        """A terminal job's workflow dependants (postgres/flow.py; fail, release,
        cancel_running and extend are shared with SQLite: ``sqlfinish.py``)."""
        pgflow.done(self, tx, now, job)  # issue 16

    # ------------------------------------------------------------------ maintenance
    @retry_transient
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

    @retry_transient
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
            # lease_at is set only on active rows: jobs_lease alone finds them (postgres/claim.py)
            "lease_at <= %s ORDER BY lease_at, seq LIMIT %s",
            (now, limit),
            "FOR UPDATE SKIP LOCKED",
        )
        for rec in (r for r in recs if r.state == "active"):
            job, worker = rec.job, rec.job.worker_id
            lifecycle.expire(job, now, max_lost)
            self._save(tx, rec)
            tx.emit("lease_lost", job, now, worker=worker, lost=job.lost)
            if job.state is JobState.DEAD_LETTER:
                tx.emit("dead_lettered", job, now, reason="worker_lost")
                pgflow.done(self, tx, now, job)  # issue 16
        return len(recs)

    @retry_transient
    def cancel_workflow(self, workflow_id: str, now: float) -> int:
        """``SqlWorkflows.cancel_workflow``, run again if PostgreSQL made it a deadlock victim
        (``retry.retry_transient``)."""
        return super().cancel_workflow(workflow_id, now)

    @retry_transient
    def requeue_node(self, job_id: str, now: float) -> bool:
        """``SqlWorkflows.requeue_node``, run again if it was a deadlock victim."""
        return super().requeue_node(job_id, now)

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
