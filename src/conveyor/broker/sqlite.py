"""SqliteBroker: the embedded durable backend (``sqlite:///path.db``), safe across processes.

One row of ``jobs`` per job: the v1 envelope in ``payload`` plus the columns that claim, retention
and search use. Each transition runs in ``BEGIN IMMEDIATE``: read rows, decode, apply the pure
``core.lifecycle`` function (as the memory broker does), write back. Transitions that keep the
arguments patch the envelope: ``args``, ``kwargs``, ``metadata`` (and an unchanged ``result``)
pass through undecoded. Durability: WAL + ``synchronous=NORMAL`` (``?synchronous=full`` to sync
every commit). Schema, indexes and guarantees: docs/architecture-sqlite.md.
"""

from __future__ import annotations

import itertools
import secrets
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import orjson

from ..config import Retention
from ..core import lifecycle
from ..core.flow import unique_holds
from ..core.job import ErrorKind, Job
from ..core.serialization import job_to_dict
from ..core.state import TERMINAL_STATES, JobState
from ..errors import DuplicateJob, LeaseLost
from . import sqllimits
from .base import Ack, Broker, Claimed, EnqueueResult, Lease
from .sqlflow import SqlFlow, SqlWorkflows
from .sqlite_admin import SqliteJobAdmin
from .sqlite_flow import SqliteDb
from .sqlite_rows import COLS, NEXT_DUE, READY, Rec, SqliteReads
from .sqlite_side import SqliteCounters, SqliteDocs, SqliteEvents, SqliteLogs
from .sqlite_store import Tx
from .sqlite_txn import enqueue_in_transaction

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_CANCELLABLE = (JobState.PENDING, *_DELAYED, JobState.WAITING)
_SAVE = (
    "UPDATE jobs SET state = ?, seq = COALESCE(?, seq), run_at = ?, due_at = ?, lease_at = ?,"
    " token = ?, finished_at = ?, last_error = ?, payload = ?, corrupt = COALESCE(corrupt, ?)"
    " WHERE rid = ?"
)
_INSERT = (
    "INSERT INTO jobs (id, queue, task, state, priority, seq, run_at, created_at, due_at,"
    " finished_at, payload, grp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_LIVE_KEY = "SELECT job_id FROM idem WHERE queue = ? AND key = ? AND expires_at > ?"
_FINISHED = "queue = ? AND state = ? AND finished_at IS NOT NULL"


def _first_repeat(ids: Sequence[str]) -> str:
    """The first id that appears a second time."""
    seen: set[str] = set()
    for job_id in ids:
        if job_id in seen:
            return job_id
        seen.add(job_id)
    raise ValueError("no repeated id")


class SqliteBroker(SqliteReads, SqliteJobAdmin, SqlWorkflows, sqllimits.SqlFlowAdmin, Broker):
    """The Broker protocol on one SQLite file (see module docstring)."""

    supports_flow = True  # rate limits, concurrency, fair groups (issue 15; sqllimits.py)

    def __init__(
        self,
        path: str,
        retention: Retention | None = None,
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 30.0,
        url: str | None = None,
    ) -> None:
        super().__init__(
            path, retention, synchronous=synchronous, busy_timeout=busy_timeout, url=url
        )
        self.docs, self.logs = SqliteDocs(self), SqliteLogs(self)  # side stores: composed parts
        self.events, self.counters = SqliteEvents(self), SqliteCounters(self)

    def _db(self, tx: Tx) -> SqliteDb:
        """The shared workflow and flow-control SQL bound to ``tx`` (sqldb.py)."""
        return SqliteDb(self, tx)

    def _rows(self, tx: Tx, where: str, params: Sequence[Any], full: bool = False) -> list[Rec]:
        sql = f"SELECT {COLS} FROM jobs WHERE {where}"
        return [Rec(row, full) for row in tx.conn.execute(sql, params)]

    def _leased(self, tx: Tx, job_id: str, token: str) -> Rec | None:
        recs = self._rows(tx, "id = ? AND state = 'active' AND token = ?", (job_id, token))
        return recs[0] if recs else None

    def _save(self, tx: Tx, rec: Rec, token: str | None = None, placed: bool = True) -> None:
        """Write a job back; ``placed`` gives it the next sequence number (its new place)."""
        job, state = rec.job, rec.job.state
        tx.conn.execute(
            _SAVE,
            (
                str(state),
                tx.next_seq() if placed else None,
                job.run_at,
                job.run_at if state in _DELAYED else None,
                job.lease_expires_at if state is JobState.ACTIVE else None,
                token,
                job.finished_at if state in TERMINAL_STATES else None,
                job.last_error,
                rec.payload(),
                rec.corrupt,
                rec.rid,
            ),
        )
        tx.count(job.queue, rec.state, str(state))
        if job.flow is not None:  # issue 15: group and slot bookkeeping of grouped jobs
            sqllimits.on_save(SqliteDb(self, tx), job, rec.state)
        if state in (JobState.COMPLETED, JobState.DEAD_LETTER):
            tx.finished.add((job.queue, str(state)))

    def _delete(self, tx: Tx, queue: str, state: str, where: str, params: Sequence[Any]) -> int:
        """Delete the ``queue`` / ``state`` jobs matching ``where``; keep ``counts`` in step."""
        n = int(tx.conn.execute(f"DELETE FROM jobs WHERE {where}", params).rowcount)
        tx.deltas[queue, state] = tx.deltas.get((queue, state), 0) - n
        return n

    def _before_commit(self, tx: Tx) -> None:
        """Cap the finished jobs (per queue, oldest first) touched by this transaction."""
        for queue, state in tx.finished:
            cap = (
                self.retention.completed_max
                if state == "completed"
                else self.retention.dead_letter_max
            )
            row = tx.conn.execute(
                "SELECT n FROM counts WHERE queue = ? AND state = ?", (queue, state)
            ).fetchone()
            excess = (row[0] if row else 0) + tx.deltas.get((queue, state), 0) - max(cap, 0)
            if excess > 0:
                self._delete(
                    tx,
                    queue,
                    state,
                    f"rid IN (SELECT rid FROM jobs WHERE {_FINISHED} ORDER BY seq LIMIT ?)",
                    (queue, state, excess),
                )
        super()._before_commit(tx)

    def enqueue(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """Store all jobs or none, in one transaction; see ``Broker.enqueue``.

        Without idempotency keys (the bulk case) no row is read first: the UNIQUE index on
        ``id`` rejects a taken id during the INSERT, which rolls the whole batch back.
        """
        with self._write() as tx:
            return self._insert(tx, jobs, now, payloads)

    def enqueue_in_transaction(
        self,
        connection: Any,
        jobs: Sequence[Job],
        *,
        payloads: Sequence[bytes] | None = None,
    ) -> list[EnqueueResult]:
        """Store ``jobs`` in the caller's open transaction on this file; see ``sqlite_txn``."""
        return enqueue_in_transaction(self, connection, jobs, payloads)

    def _txn_enqueue(
        self, conn: Any, jobs: Sequence[Job], payloads: Sequence[bytes], now: float, also: Any
    ) -> None:
        """A workflow's jobs and ``also`` (its graph) in the caller's transaction (sqlflow.py)."""
        enqueue_in_transaction(self, conn, jobs, payloads, also)

    def _insert(
        self, tx: Tx, jobs: Sequence[Job], now: float, payloads: Sequence[bytes] | None
    ) -> list[EnqueueResult]:
        """``enqueue``'s work inside ``tx`` (the broker's own or the caller's transaction)."""
        if any(job.idempotency_key for job in jobs):
            results, fresh = self._screen(tx, jobs, now, payloads)
        else:
            blobs: Sequence[bytes | None] = payloads or [None] * len(jobs)
            fresh = {j.id: (j, p) for j, p in zip(jobs, blobs, strict=True)}
            if len(fresh) != len(jobs):  # an id twice in the batch: report the first
                raise DuplicateJob(_first_repeat([j.id for j in jobs]))
            results = [EnqueueResult(j.id, False, j.state) for j in jobs]
        new = [job for job, _ in fresh.values()]
        tx.events.extend(
            {
                "type": "enqueued",
                "job_id": j.id,
                "queue": j.queue,
                "task": j.task,
                "at": now,
                "state": str(j.state),
            }
            for j in new
        )
        for (queue, name), n in Counter((j.queue, str(j.state)) for j in new).items():
            tx.count(queue, None, name, n)
        seq0 = tx.bump("seq", len(new)) - len(new)  # one range of places for the batch
        c, before = tx.conn, tx.conn.total_changes
        try:
            c.executemany(
                _INSERT,
                [
                    (
                        j.id,
                        j.queue,
                        j.task,
                        str(j.state),
                        j.priority,
                        seq0 + i,
                        j.run_at,
                        j.created_at,
                        j.run_at if j.state in _DELAYED else None,
                        j.finished_at if j.state in TERMINAL_STATES else None,
                        p if p is not None else orjson.dumps(job_to_dict(j)),
                        j.flow["g"] if j.flow else None,  # issue 15: its group, if any
                    )
                    for i, (j, p) in enumerate(fresh.values(), 1)
                ],
            )
        except sqlite3.IntegrityError:  # executemany stops at the first rejected row
            job = new[c.total_changes - before]
            if c.execute("SELECT 1 FROM jobs WHERE id = ?", (job.id,)).fetchone():
                raise DuplicateJob(job.id) from None
            raise
        grouped = [j for j in new if j.flow is not None]
        if grouped:
            sqllimits.on_insert(SqliteDb(self, tx), grouped)
        keyed = [j for j in new if j.idempotency_key]
        c.executemany(
            "INSERT OR REPLACE INTO idem (queue, key, job_id, expires_at) VALUES (?, ?, ?, ?)",
            [(j.queue, j.idempotency_key, j.id, now + j.idempotency_ttl) for j in keyed],
        )
        c.executemany(
            "INSERT OR IGNORE INTO queues (name) VALUES (?)",
            [(q,) for q in sorted({j.queue for j in new})],
        )
        return results

    def _screen(
        self, tx: Tx, jobs: Sequence[Job], now: float, payloads: Sequence[bytes] | None
    ) -> tuple[list[EnqueueResult], dict[str, tuple[Job, bytes | None]]]:
        """Idempotency keys: the result of each job and the jobs to insert (in order)."""
        c = tx.conn
        ids = orjson.dumps([job.id for job in jobs]).decode()
        sql = "SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(?))"
        taken = {r[0] for r in c.execute(sql, (ids,))}
        results: list[EnqueueResult] = []
        fresh: dict[str, tuple[Job, bytes | None]] = {}
        batch_keys: dict[tuple[str, str], str] = {}
        for i, job in enumerate(jobs):
            if job.id in taken or job.id in fresh:
                raise DuplicateJob(job.id)
            key = (job.queue, job.idempotency_key) if job.idempotency_key else None
            live = c.execute(_LIVE_KEY, (*key, now)).fetchone() if key else None
            if live and key and key[1].startswith(("unique:", "debounce:")):
                held = c.execute("SELECT state FROM jobs WHERE id = ?", (live[0],)).fetchone()
                live = live if unique_holds(key[1], held[0] if held else None) else None
            existing = live[0] if live else batch_keys.get(key) if key else None
            if existing is not None:
                row = c.execute("SELECT state FROM jobs WHERE id = ?", (existing,)).fetchone()
                state = JobState(row[0]) if row else job.state
                results.append(EnqueueResult(existing, True, state))
                continue
            if key:
                batch_keys[key] = job.id
            fresh[job.id] = (job, None if payloads is None else payloads[i])
            results.append(EnqueueResult(job.id, False, job.state))
        return results, fresh

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
        leases come back (``max_lost`` applies). An empty claim reports ``next_due`` over all
        queues (both steps cover every queue, so nothing reported is ever overdue).
        """
        leases: list[Lease] = []
        with self._write() as tx:
            self._promote(tx, now, 10_000)
            self._expire(tx, now, max_lost, 10_000)
            paused = {r[0] for r in tx.conn.execute("SELECT name FROM queues WHERE paused = 1")}
            served = [q for q in queues if q not in paused]
            flowing = self.supports_flow and self._has_groups(tx)
            for queue in served:
                if flowing:  # grouped jobs first (issue 15; sqllimits.py)
                    one = partial(self._lease, tx, now=now, vt=visibility_timeout, wid=worker_id)
                    lease = sqllimits.each(one)  # row by row: a statement costs little here
                    leases += sqllimits.take(self._db(tx), queue, now, limit - len(leases), lease)
                while len(leases) < limit:
                    recs = self._rows(tx, READY, (queue, limit - len(leases)), full=True)
                    for rec in recs:
                        leased = self._lease(tx, rec, now, visibility_timeout, worker_id)
                        if leased is not None:
                            leases.append(leased)
                    if not recs:
                        break
            next_due = None if leases else self._next_due(tx)
            if not leases and flowing:
                next_due = sqllimits.next_due(self._db(tx), now, next_due, served)
        return Claimed.of(leases, next_due)

    def _has_groups(self, tx: Tx) -> bool:
        """Any flow group at all (one index probe; the gate that keeps unlimited claims as
        they were)."""
        return tx.conn.execute("SELECT 1 FROM flow_groups LIMIT 1").fetchone() is not None

    def _next_due(self, tx: Tx) -> float | None:
        """The earliest delayed run_at or lease deadline of any queue (two index lookups).

        Also remembers, for this thread's next ``wait_for_work``, what this claim saw and the
        ``data_version`` it saw it at (read under the write lock: no commit can slip between),
        so a retry recorded right after the claim still wakes the wait.
        """
        row = tuple(tx.conn.execute(NEXT_DUE).fetchone())
        self._local.claim_view = (tx.conn.execute("PRAGMA data_version").fetchone()[0], row)
        times = [float(t) for t in row if t is not None]
        return min(times) if times else None

    def _lease(self, tx: Tx, rec: Rec, now: float, vt: float, wid: str) -> Lease | None:
        """Lease one ready row; an undecodable one is dead-lettered (``decode_error``) instead.

        A row past its ``expires_at`` (issue 15) becomes ``expired`` and is not leased.
        """
        if sqllimits.lapsed(self._db(tx), rec, now):  # a workflow node: its dependants fail
            return None
        if rec.corrupt is None:
            lifecycle.claim(rec.job, now, vt, wid)
            token = secrets.token_hex(12)
            try:
                self._save(tx, rec, token)
            except (TypeError, ValueError, RecursionError) as exc:  # cannot be re-encoded
                rec.spoil(rec.row, rec.row[10], exc)  # nothing was written: bury it instead
            else:
                tx.emit("started", rec.job, now, attempt=rec.job.attempts, worker=wid)
                return Lease(rec.job, token, now + vt)
        lifecycle.claim(rec.job, now, vt, wid)
        self._bury_corrupt(tx, rec, now, wid)
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

    def complete(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """Record each success, all in one transaction; False for stale tokens."""
        out: list[bool] = []
        with self._write() as tx:
            finished: list[Job] = []
            for ack in acks:
                rec = self._leased(tx, ack.job_id, ack.token)
                if rec is not None:
                    lifecycle.complete(rec.job, now, ack.result, ack.error)
                    self._save(tx, rec)
                    tx.emit("completed", rec.job, now, attempt=rec.job.attempts)
                    finished.append(rec.job)
                out.append(rec is not None)
            SqlFlow(self._db(tx), now).done_many(finished)  # workflow dependants: one query
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
                SqlFlow(self._db(tx), now).done(job)
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
        """active → cancelled by the lease holder (fenced), in one write transaction."""
        with self._write() as tx:
            if (rec := self._leased(tx, job_id, token)) is None:
                raise LeaseLost(job_id)
            lifecycle.cancel_running(rec.job, now, note)
            self._save(tx, rec)
            tx.emit("cancelled", rec.job, now, note=note)
            SqlFlow(self._db(tx), now).done(rec.job)
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

    def promote_due(self, now: float, limit: int = 1000) -> int:
        """Move due delayed jobs to pending."""
        with self._write() as tx:
            return self._promote(tx, now, limit)

    def _promote(self, tx: Tx, now: float, limit: int) -> int:
        recs = self._rows(tx, "due_at <= ? ORDER BY due_at, seq LIMIT ?", (now, limit))
        for rec in recs:
            lifecycle.promote(rec.job)
            self._save(tx, rec)
        return len(recs)

    def reap_expired(self, now: float, *, max_lost: int = 3) -> int:
        """Return expired leases to pending (poison pills to dead letter), then housekeeping:
        completed / cancelled TTLs, expired keys, documents and counters, free pages."""
        with self._write() as tx:
            reaped = self._expire(tx, now, max_lost, 2**62)
            ttls = (
                ("completed", self.retention.completed_ttl),
                ("cancelled", self.retention.cancelled_ttl),
            )
            for (queue,), (state, ttl) in itertools.product(
                tx.conn.execute("SELECT name FROM queues").fetchall(), ttls
            ):
                # like the memory broker's rings: drop in finish order up to the first live one
                self._delete(
                    tx,
                    queue,
                    state,
                    f"{_FINISHED} AND seq < COALESCE((SELECT seq FROM"
                    f" jobs WHERE {_FINISHED} AND finished_at > ? ORDER BY seq LIMIT 1),"
                    f" {2**63 - 1})",
                    (queue, state, queue, state, now - ttl),
                )
            self._housekeep_side(tx, now)
            self.sweep_workflows(tx, now)  # graphs whose jobs are all gone (sqlflow.py)
            return reaped

    def _expire(self, tx: Tx, now: float, max_lost: int, limit: int) -> int:
        """Expired leases → pending (``lost += 1``), the ``max_lost``-th loss → dead letter."""
        recs = self._rows(
            tx, "lease_at <= ? AND state = 'active' ORDER BY lease_at, seq LIMIT ?", (now, limit)
        )
        for rec in recs:
            job, worker = rec.job, rec.job.worker_id
            lifecycle.expire(job, now, max_lost)
            self._save(tx, rec)
            tx.emit("lease_lost", job, now, worker=worker, lost=job.lost)
            if job.state is JobState.DEAD_LETTER:
                tx.emit("dead_lettered", job, now, reason="worker_lost")
                SqlFlow(self._db(tx), now).done(job)
        return len(recs)

    def _admin(self, job_id: str, now: float, allowed: Sequence[JobState], event: str) -> bool:
        with self._write() as tx:
            recs = self._rows(tx, "id = ?", (job_id,))
            if not recs or recs[0].job.state not in allowed:
                return False
            (lifecycle.cancel if event == "cancelled" else lifecycle.requeue)(recs[0].job, now)
            self._save(tx, recs[0])
            tx.emit(event, recs[0].job, now)
            if event == "cancelled":
                SqlFlow(self._db(tx), now).done(recs[0].job)
            return True

    def cancel(self, job_id: str, now: float) -> bool:
        """Cancel a job that has not started (scheduled / pending / retry_scheduled)."""
        return self._admin(job_id, now, _CANCELLABLE, "cancelled")

    def requeue(self, job_id: str, now: float) -> bool:
        """Revive a dead-letter or cancelled job: pending, attempts and lost reset to 0."""
        revivable = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)
        return self._admin(job_id, now, revivable, "requeued")

    def clear_queue(self, queue: str, now: float) -> int:
        """Delete the waiting jobs of ``queue`` in one write transaction."""
        where = "queue = ? AND state = ?"
        with self._write() as tx:
            n = sum(
                self._delete(tx, queue, state, where, (queue, state))
                for state in ("pending", "scheduled", "retry_scheduled")
            )
            sqllimits.forget_queue(self._db(tx), queue)  # issue 15: its groups go with its jobs
            return n

    def purge(
        self,
        now: float,
        *,
        state: JobState = JobState.DEAD_LETTER,
        older_than: float | None = None,
        queue: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete terminal jobs in ``state`` (optionally by age, queue and ids)."""
        if state not in TERMINAL_STATES:
            raise ValueError("purge: only terminal states can be purged")
        id_list = None if ids is None else orjson.dumps(list(ids)).decode()
        where = (
            f"{_FINISHED} AND finished_at <= ? AND (? IS NULL OR id IN"
            " (SELECT value FROM json_each(?)))"
        )
        cutoff = float("inf") if older_than is None else now - older_than
        with self._write() as tx:
            names = [r[0] for r in tx.conn.execute("SELECT name FROM queues")]
            return sum(
                self._delete(tx, q, str(state), where, (q, str(state), cutoff, id_list, id_list))
                for q in names
                if queue is None or q == queue
            )
