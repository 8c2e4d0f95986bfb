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
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..core import lifecycle
from ..core.job import ErrorKind, Job
from ..core.serialization import job_from_dict, job_to_dict
from ..core.state import TERMINAL_STATES, JobState
from ..errors import DecodeError, DuplicateJob, LeaseLost
from .base import Ack, Broker, EnqueueResult, Lease, Page, SearchQuery
from .sqlite_store import SqliteStore, Tx

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_COLS = ("rid, id, queue, task, state, priority, run_at, created_at, finished_at, last_error,"
         " payload")  # the row layout _Rec reads
_SAVE = ("UPDATE jobs SET state = ?, seq = COALESCE(?, seq), run_at = ?, due_at = ?, lease_at = ?,"
         " token = ?, finished_at = ?, last_error = ?, payload = ?, corrupt = COALESCE(corrupt, ?)"
         " WHERE rid = ?")  # fmt: skip
_INSERT = ("INSERT INTO jobs (id, queue, task, state, priority, seq, run_at, created_at, due_at,"
           " finished_at, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")  # fmt: skip
_LIVE_KEY = "SELECT job_id FROM idem WHERE queue = ? AND key = ? AND expires_at > ?"
_FINISHED = "queue = ? AND state = ? AND finished_at IS NOT NULL"
_READY = "queue = ? AND state = 'pending' ORDER BY priority, seq LIMIT ?"
_SEARCH = {"id": "id >= :id AND id < :id || char(1114111)", "state": "state = :state",
           "task": "task = :task", "queue": "queue = :queue", "since": "created_at >= :since",
           "until": "created_at < :until", "error": "cv_icontains(last_error, :error)",
           "text": "cv_text(payload, :text)"}  # indexed: id (prefix), state, task, queue, time
_COUNTED = ("state", "queue")
_COUNTED_TOTAL = ("SELECT COALESCE(SUM(n), 0) FROM counts WHERE queue != '' AND state ="
                  " COALESCE(:state, state) AND queue = COALESCE(:queue, queue)")
_BLANK: dict[str, Any] = {"args": [], "kwargs": {}, "metadata": {}, "result": None}
_KEEP = object()  # "result unchanged": the stored encoded result passes through


class _Rec:
    """A job row: the Job (a stub from the columns if the payload is corrupt), its envelope dict,
    the original bytes of a corrupt payload, and the state the row had (for ``counts``)."""

    __slots__ = ("corrupt", "data", "job", "rid", "state")

    def __init__(self, row: tuple[Any, ...], full: bool) -> None:
        self.rid, self.state, raw = row[0], row[4], row[10]
        self.corrupt: bytes | None = None
        self.data: dict[str, Any] | None = None
        try:
            data = orjson.loads(raw)
            if not isinstance(data, dict):
                raise DecodeError("envelope must be a JSON object")
            self.job = job_from_dict(data if full else {**data, **_BLANK})
            if (self.job.id, self.job.queue, str(self.job.state)) != (row[1], row[2], row[4]):
                raise DecodeError("envelope does not match its row (id, queue or state)")
            self.data, self.job.result = data, self.job.result if full else _KEEP
        except (DecodeError, orjson.JSONDecodeError, TypeError) as exc:
            self.job = Job(id=row[1], task=row[3], queue=row[2], priority=row[5],
                           state=JobState(row[4]), run_at=row[6], created_at=row[7],
                           finished_at=row[8], last_error=row[9] or f"decode_error: {exc}",
                           metadata={"decode_error": str(exc)})  # fmt: skip
            self.corrupt = raw if isinstance(raw, bytes) else str(raw).encode()

    def payload(self) -> bytes:
        """The envelope of the (changed) job; undecoded parts pass through as stored."""
        job, data = self.job, self.data
        if data is None:  # corrupt: the stored bytes stay until the job is dead-lettered
            return orjson.dumps(job_to_dict(job)) if job.state is JobState.DEAD_LETTER else \
                self.corrupt or b""  # fmt: skip
        saved = job.args, job.kwargs, job.metadata, job.result
        job.args, job.kwargs, job.metadata = [], {}, {}
        job.result = None if saved[3] is _KEEP else saved[3]
        try:
            out = job_to_dict(job)
        finally:
            job.args, job.kwargs, job.metadata, job.result = saved
        out.update(args=data.get("args"), kwargs=data.get("kwargs"), metadata=data.get("metadata"))
        if saved[3] is _KEEP:
            out["result"] = data.get("result")
        return orjson.dumps(out)


class SqliteBroker(SqliteStore, Broker):
    """The Broker protocol on one SQLite file (see module docstring)."""

    def _rows(self, tx: Tx, where: str, params: Sequence[Any], full: bool = False) -> list[_Rec]:
        sql = f"SELECT {_COLS} FROM jobs WHERE {where}"
        return [_Rec(row, full) for row in tx.conn.execute(sql, params)]

    def _leased(self, tx: Tx, job_id: str, token: str) -> _Rec | None:
        recs = self._rows(tx, "id = ? AND state = 'active' AND token = ?", (job_id, token))
        return recs[0] if recs else None

    def _save(self, tx: Tx, rec: _Rec, token: str | None = None, placed: bool = True) -> None:
        """Write a job back; ``placed`` gives it the next sequence number (its new place)."""
        job, state = rec.job, rec.job.state
        tx.conn.execute(_SAVE, (
            str(state), tx.next_seq() if placed else None, job.run_at,
            job.run_at if state in _DELAYED else None,
            job.lease_expires_at if state is JobState.ACTIVE else None, token,
            job.finished_at if state in TERMINAL_STATES else None, job.last_error,
            rec.payload(), rec.corrupt, rec.rid))  # fmt: skip
        tx.count(job.queue, rec.state, str(state))
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
            cap = self.retention.completed_max if state == "completed" else \
                self.retention.dead_letter_max  # fmt: skip
            row = tx.conn.execute("SELECT n FROM counts WHERE queue = ? AND state = ?",
                                  (queue, state)).fetchone()  # fmt: skip
            excess = (row[0] if row else 0) + tx.deltas.get((queue, state), 0) - max(cap, 0)
            if excess > 0:
                self._delete(tx, queue, state, f"rid IN (SELECT rid FROM jobs WHERE {_FINISHED}"
                             " ORDER BY seq LIMIT ?)", (queue, state, excess))  # fmt: skip
        super()._before_commit(tx)

    def enqueue(
        self, jobs: Sequence[Job], now: float, payloads: Sequence[bytes] | None = None
    ) -> list[EnqueueResult]:
        """Store all jobs or none, in one transaction; see ``Broker.enqueue``."""
        with self._write() as tx:
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
                tx.emit("enqueued", job, now, state=str(job.state))
            new = [job for job, _ in fresh.values()]
            for (queue, name), n in Counter((j.queue, str(j.state)) for j in new).items():
                tx.count(queue, None, name, n)
            seq0 = tx.bump("seq", len(new)) - len(new)  # one range of places for the batch
            c.executemany(_INSERT, [(
                j.id, j.queue, j.task, str(j.state), j.priority, seq0 + i, j.run_at, j.created_at,
                j.run_at if j.state in _DELAYED else None,
                j.finished_at if j.state in TERMINAL_STATES else None,
                p if p is not None else orjson.dumps(job_to_dict(j)))
                for i, (j, p) in enumerate(fresh.values(), 1)])  # fmt: skip
            keyed = [j for j in new if j.idempotency_key]
            c.executemany("INSERT OR REPLACE INTO idem (queue, key, job_id, expires_at) VALUES"
                          " (?, ?, ?, ?)", [(j.queue, j.idempotency_key, j.id,
                                             now + j.idempotency_ttl) for j in keyed])  # fmt: skip
            c.executemany("INSERT OR IGNORE INTO queues (name) VALUES (?)",
                          [(q,) for q in sorted({j.queue for j in new})])  # fmt: skip
            return results

    def claim(
        self, queues: Sequence[str], now: float, *, limit: int = 1,
        visibility_timeout: float = 30.0, worker_id: str = "",
    ) -> list[Lease]:  # fmt: skip
        """Lease up to ``limit`` ready jobs, queues in the given order, in one transaction."""
        leases: list[Lease] = []
        with self._write() as tx:
            self._promote(tx, now, 10_000)
            paused = {r[0] for r in tx.conn.execute("SELECT name FROM queues WHERE paused = 1")}
            for queue in (q for q in queues if q not in paused):
                while len(leases) < limit:
                    recs = self._rows(tx, _READY, (queue, limit - len(leases)), full=True)
                    for rec in recs:
                        lifecycle.claim(rec.job, now, visibility_timeout, worker_id)
                        if rec.corrupt is not None:
                            self._bury_corrupt(tx, rec, now, worker_id)
                            continue
                        token = secrets.token_hex(12)
                        self._save(tx, rec, token)
                        tx.emit("started", rec.job, now, attempt=rec.job.attempts, worker=worker_id)
                        leases.append(Lease(rec.job, token, now + visibility_timeout))
                    if not recs:
                        break
        return leases

    def _bury_corrupt(self, tx: Tx, rec: _Rec, now: float, worker_id: str) -> None:
        """An undecodable row: active → dead_letter with kind ``decode_error``; bytes kept."""
        error = {"kind": str(ErrorKind.DECODE_ERROR), "type": "DecodeError", "traceback": "",
                 "message": str(rec.job.metadata.get("decode_error")),
                 "worker": worker_id or None, "at": now}  # fmt: skip
        lifecycle.fail(rec.job, now, error, None)
        self._save(tx, rec)
        tx.emit("dead_lettered", rec.job, now, reason=str(ErrorKind.DECODE_ERROR))

    def complete(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """Record each success, all in one transaction; False for stale tokens."""
        out: list[bool] = []
        with self._write() as tx:
            for ack in acks:
                rec = self._leased(tx, ack.job_id, ack.token)
                if rec is not None:
                    lifecycle.complete(rec.job, now, ack.result)
                    self._save(tx, rec)
                    tx.emit("completed", rec.job, now, attempt=rec.job.attempts)
                out.append(rec is not None)
        return out

    def fail(
        self, job_id: str, token: str, now: float, *, error: Mapping[str, Any],
        retry_at: float | None,
    ) -> JobState:  # fmt: skip
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
            else:
                tx.emit("retry_scheduled", job, now, run_at=retry_at)
            return job.state

    def release(
        self, job_id: str, token: str, now: float, *, delay: float = 0.0, penalize: bool = True,
        note: str = "released",
    ) -> JobState:  # fmt: skip
        """Give the job back (pending now, or scheduled after ``delay``)."""
        with self._write() as tx:
            if (rec := self._leased(tx, job_id, token)) is None:
                raise LeaseLost(job_id)
            lifecycle.release(rec.job, now, delay, penalize, note)
            self._save(tx, rec)
            tx.emit("released", rec.job, now, note=note)
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
            recs = self._rows(tx, "state = 'active' AND lease_at <= ? ORDER BY seq", (now,))
            for rec in recs:
                job, worker = rec.job, rec.job.worker_id
                lifecycle.expire(job, now, max_lost)
                self._save(tx, rec)
                tx.emit("lease_lost", job, now, worker=worker, lost=job.lost)
                if job.state is JobState.DEAD_LETTER:
                    tx.emit("dead_lettered", job, now, reason="worker_lost")
            ttls = (("completed", self.retention.completed_ttl),
                    ("cancelled", self.retention.cancelled_ttl))  # fmt: skip
            for (queue,), (state, ttl) in itertools.product(tx.conn.execute(
                    "SELECT name FROM queues").fetchall(), ttls):  # fmt: skip
                # like the memory broker's rings: drop in finish order up to the first live one
                self._delete(tx, queue, state, f"{_FINISHED} AND seq < COALESCE((SELECT seq FROM"
                             f" jobs WHERE {_FINISHED} AND finished_at > ? ORDER BY seq LIMIT 1),"
                             f" {2**63 - 1})", (queue, state, queue, state, now - ttl))  # fmt: skip
            self._housekeep_side(tx, now)
            return len(recs)

    def get(self, job_id: str) -> Job | None:
        """A fresh snapshot, or None (a corrupt row reads as a stub built from its columns)."""
        sql = f"SELECT {_COLS} FROM jobs WHERE id = ?"
        row = self._conn().execute(sql, (job_id,)).fetchone()
        return None if row is None else _Rec(row, True).job

    def _admin(self, job_id: str, now: float, allowed: Sequence[JobState], event: str) -> bool:
        with self._write() as tx:
            recs = self._rows(tx, "id = ?", (job_id,))
            if not recs or recs[0].job.state not in allowed:
                return False
            (lifecycle.cancel if event == "cancelled" else lifecycle.requeue)(recs[0].job, now)
            self._save(tx, recs[0])
            tx.emit(event, recs[0].job, now)
            return True

    def cancel(self, job_id: str, now: float) -> bool:
        """Cancel a job that has not started (scheduled / pending / retry_scheduled)."""
        return self._admin(job_id, now, (JobState.PENDING, *_DELAYED), "cancelled")

    def requeue(self, job_id: str, now: float) -> bool:
        """Revive a dead-letter or cancelled job: pending, attempts and lost reset to 0."""
        return self._admin(job_id, now, (JobState.DEAD_LETTER, JobState.CANCELLED), "requeued")

    def purge(
        self, now: float, *, state: JobState = JobState.DEAD_LETTER,
        older_than: float | None = None, queue: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:  # fmt: skip
        """Delete terminal jobs in ``state`` (optionally by age, queue and ids)."""
        if state not in TERMINAL_STATES:
            raise ValueError("purge: only terminal states can be purged")
        id_list = None if ids is None else orjson.dumps(list(ids)).decode()
        where = (f"{_FINISHED} AND finished_at <= ? AND (? IS NULL OR id IN"
                 " (SELECT value FROM json_each(?)))")  # fmt: skip
        cutoff = float("inf") if older_than is None else now - older_than
        with self._write() as tx:
            names = [r[0] for r in tx.conn.execute("SELECT name FROM queues")]
            return sum(self._delete(tx, q, str(state), where,
                                    (q, str(state), cutoff, id_list, id_list))
                       for q in names if queue is None or q == queue)  # fmt: skip

    def peek(self, queue: str, n: int = 10) -> list[Job]:
        """The next ``n`` ready jobs of ``queue`` in claim order."""
        sql = f"SELECT {_COLS} FROM jobs WHERE {_READY}"
        return [_Rec(row, True).job for row in self._conn().execute(sql, (queue, n))]

    def search(self, query: SearchQuery) -> Page:
        """Filter in SQL (an index narrows first), newest first, one page."""
        q = query
        p = {"id": q.id or None, "state": str(q.state) if q.state else None, "task": q.task or None,
             "queue": q.queue or None, "since": q.since, "until": q.until,
             "error": q.error.lower() if q.error else None,
             "text": q.text.lower().encode() if q.text else None,
             "limit": q.page_size, "offset": (max(1, q.page) - 1) * q.page_size}  # fmt: skip
        where = " AND ".join(sql for key, sql in _SEARCH.items() if p[key] is not None) or "1"
        c, only_counts = self._conn(), all(p[k] is None for k in _SEARCH if k not in _COUNTED)
        total = c.execute(_COUNTED_TOTAL if only_counts else  # no filter beyond state / queue
                          f"SELECT COUNT(*) FROM jobs WHERE {where}", p).fetchone()[0]  # fmt: skip
        order = "+created_at" if p["id"] else "created_at"  # "+": let the id index drive
        rows = c.execute(f"SELECT {_COLS} FROM jobs WHERE {where} ORDER BY {order} DESC,"
                         " id DESC LIMIT :limit OFFSET :offset", p)  # fmt: skip
        return Page([_Rec(r, True).job for r in rows], int(total), q.page, q.page_size)

    def oldest_pending(self, queue: str) -> float | None:
        """Ready time (run_at, or created_at when run_at is 0) of the oldest pending job."""
        sql = "SELECT MIN({}) FROM jobs WHERE queue = ? AND state = 'pending' AND run_at {} 0"
        found = [self._conn().execute(sql.format(col, op), (queue,)).fetchone()[0]
                 for col, op in (("run_at", "!="), ("created_at", "="))]  # fmt: skip
        return min((float(t) for t in found if t is not None), default=None)

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """Return when a ready job may exist in ``queues``, or after ``timeout`` s.

        Polls ``PRAGMA data_version`` (it changes when another connection commits) every 50 ms
        and only then looks for pending jobs: no busy loop, at most ~50 ms of added latency.
        """
        deadline, c = time.monotonic() + timeout, self._conn()
        version = c.execute("PRAGMA data_version").fetchone()[0]
        while not self._has_ready(c, queues):
            while version == (version := c.execute("PRAGMA data_version").fetchone()[0]):
                if (remaining := deadline - time.monotonic()) <= 0:
                    return
                time.sleep(min(remaining, 0.05))

    @staticmethod
    def _has_ready(c: sqlite3.Connection, queues: Sequence[str]) -> bool:
        paused = {r[0] for r in c.execute("SELECT name FROM queues WHERE paused = 1")}
        sql = "SELECT 1 FROM jobs WHERE queue = ? AND state = 'pending' LIMIT 1"
        return any(c.execute(sql, (q,)).fetchone() for q in queues if q not in paused)
