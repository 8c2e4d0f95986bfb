"""SqliteBroker: the embedded durable backend (``sqlite:///path.db``), safe across processes.

One row of ``jobs`` per job: the v1 envelope in ``payload`` plus the columns that claim, retention
and search use. Each transition runs in ``BEGIN IMMEDIATE``: read rows, decode, apply the pure
``core.lifecycle`` function (as the memory broker does), write back. Transitions that keep the
arguments patch the envelope: ``args``, ``kwargs``, ``metadata`` (and an unchanged ``result``)
pass through undecoded. Durability: WAL + ``synchronous=NORMAL`` (``?synchronous=full`` to sync
every commit). Schema, indexes and guarantees: docs/architecture-sqlite.md.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson

from ..config import Retention
from ..core.flow import unique_holds
from ..core.job import Job
from ..core.serialization import job_to_dict
from ..core.state import TERMINAL_STATES, JobState
from ..errors import DuplicateJob
from . import sqllimits
from .base import Broker, EnqueueResult
from .sqlflow import SqlWorkflows
from .sqlite_admin import SqliteJobAdmin
from .sqlite_claim import SqliteClaim
from .sqlite_finish import SqliteFinish
from .sqlite_flow import SqliteDb
from .sqlite_maint import SqliteMaintenance
from .sqlite_rows import COLS, FINISHED, Rec, SqliteReads
from .sqlite_side import SqliteCounters, SqliteDocs, SqliteEvents, SqliteLogs
from .sqlite_store import Tx
from .sqlite_txn import enqueue_in_transaction

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
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


def _first_repeat(ids: Sequence[str]) -> str:
    """The first id that appears a second time."""
    seen: set[str] = set()
    for job_id in ids:
        if job_id in seen:
            return job_id
        seen.add(job_id)
    raise ValueError("no repeated id")


class SqliteBroker(
    SqliteReads,
    SqliteMaintenance,
    SqliteClaim,
    SqliteFinish,
    SqliteJobAdmin,
    SqlWorkflows,
    sqllimits.SqlFlowAdmin,
    Broker,
):
    """The Broker protocol on one SQLite file (see module docstring).

    Its transitions live in mixins by duty: the claim path (``sqlite_claim.py``), the lease
    holder's transitions (``sqlite_finish.py``), timers and retention (``sqlite_maint.py``),
    operator actions (``sqlite_admin.py``); reads in ``sqlite_rows.py``.
    """

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
        elif rec.corrupt is not None and rec.state == "active" and state is not JobState.ACTIVE:
            sqllimits.free_held(SqliteDb(self, tx), job.id)  # slots it took before it went bad
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
                    f"rid IN (SELECT rid FROM jobs WHERE {FINISHED} ORDER BY seq LIMIT ?)",
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
