"""The lease holder's transitions of the SQLite broker: complete, fail, release,
cancel_running, extend.

A mixin of ``SqliteBroker`` (``sqlite.py``), split from it to keep each duty one screen long.
Each call is one ``BEGIN IMMEDIATE`` transaction that finds the row only while the caller's
lease still holds (``_leased``: active, same fencing token), applies the pure
``core.lifecycle`` function and writes the row back; a workflow node's dependants are ended or
released in the same transaction (``SqlFlow``, sqlflow.py). Methods moved here, not wrapped:
the per-job cost is the same as when they lived in ``sqlite.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from ..errors import LeaseLost
from .base import Ack
from .sqlflow import SqlFlow
from .sqlite_flow import SqliteDb
from .sqlite_rows import Rec
from .sqlite_store import Tx


class SqliteFinish:
    """``complete``, ``fail``, ``release``, ``cancel_running`` and ``extend`` of
    ``SqliteBroker``."""

    _write: Callable[[], AbstractContextManager[Tx]]
    _leased: Callable[[Tx, str, str], Rec | None]
    _save: Callable[..., None]
    _db: Callable[[Tx], SqliteDb]

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
