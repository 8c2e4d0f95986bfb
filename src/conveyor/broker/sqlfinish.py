"""The lease holder's transitions shared by the SQL brokers (SQLite and PostgreSQL): fail,
release, cancel_running and extend, written once.

Each call is one write transaction that finds the row only while the caller's lease still holds
(``_leased``: active, same fencing token), applies the pure ``core.lifecycle`` function, writes
the row back (``_save``) and records the event; a job that reached a terminal state ends or
releases its workflow dependants in the same transaction (``_flow_done``, each broker's own
gate: sqlflow.py on SQLite, postgres/flow.py on PostgreSQL). ``complete`` stays per backend: it
is the hot path (SQLite row by row, PostgreSQL set-based in postgres/finish.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from ..errors import LeaseLost


class SqlLeaseTransitions:
    """``fail``, ``release``, ``cancel_running`` and ``extend`` of a SQL broker (mixed in)."""

    _write: Callable[[], AbstractContextManager[Any]]
    _leased: Callable[[Any, str, str], Any]
    _save: Callable[..., None]

    def _flow_done(self, tx: Any, now: float, job: Job) -> None:
        """``job`` reached a terminal state: its workflow dependants (the broker's hook)."""
        raise NotImplementedError

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
            job: Job = rec.job
            tx.emit("failed", job, now, attempt=job.attempts, error=job.last_error)
            if retry_at is None:
                tx.emit("dead_lettered", job, now, reason=error.get("kind"))
                self._flow_done(tx, now, job)
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
            state: JobState = rec.job.state
            return state

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
            self._flow_done(tx, now, rec.job)
            state: JobState = rec.job.state
            return state

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
