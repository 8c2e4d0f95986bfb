"""Operator actions of the PostgreSQL broker: cancel, requeue, run now, delete one job, clear a
queue, purge.

Split from ``broker.py`` to keep it short. Each is one transaction that locks the job's row
(``FOR UPDATE``), checks its state and writes it back or deletes it, so a worker claiming the
job at the same moment sees either the old or the new row, never half of each (the claim's
``SKIP LOCKED`` passes over a row locked here; a row the claim holds makes us wait for it).

Conveyor's own transactions lock job rows in one order (ids ascending where they take several),
but an application's transaction may not: if PostgreSQL picks an operator action as the victim
of a deadlock (SQLSTATE 40P01; it rolled back entirely), or it fails to serialize or to get a
lock in time, the action runs again (``retry.retry_transient``: a few attempts, jittered)
instead of showing the operator a spurious ``BrokerUnavailable``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ...core import lifecycle
from ...core.state import JobState
from ..sqlite_rows import Rec
from . import flow as pgflow
from .maintenance import release_keys
from .retry import Retry, retry_transient
from .store import Tx

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_WAITING = ("pending", "scheduled", "retry_scheduled")


class PgJobAdmin:
    """The operator actions of ``PostgresBroker`` (see the module docstring)."""

    _write: Callable[[], AbstractContextManager[Tx]]
    _rows: Callable[..., list[Rec]]
    _save: Callable[..., None]
    _delete: Callable[[Tx, str, str, str, Sequence[Any]], int]
    sql: Callable[[str], str]
    retry: Retry  # the lock-conflict retry policy (postgres/retry.py)

    def _admin(self, job_id: str, now: float, allowed: Sequence[JobState], event: str) -> bool:
        with self._write() as tx:
            recs = self._rows(tx, "id = %s", (job_id,), "FOR UPDATE")
            if not recs or recs[0].job.state not in allowed:
                return False
            (lifecycle.cancel if event == "cancelled" else lifecycle.requeue)(recs[0].job, now)
            self._save(tx, recs[0])
            tx.emit(event, recs[0].job, now)
            if event == "cancelled":  # issue 16: a workflow node's dependants end
                pgflow.done(self, tx, now, recs[0].job)  # type: ignore[arg-type]
            return True

    @retry_transient
    def cancel(self, job_id: str, now: float) -> bool:
        """Cancel a job that has not started (scheduled / pending / retry_scheduled)."""
        return self._admin(
            job_id, now, (JobState.PENDING, *_DELAYED, JobState.WAITING), "cancelled"
        )

    @retry_transient
    def requeue(self, job_id: str, now: float) -> bool:
        """Revive a dead-letter or cancelled job: pending, attempts and lost reset to 0."""
        revivable = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)
        return self._admin(job_id, now, revivable, "requeued")

    @retry_transient
    def run_now(self, job_id: str, now: float) -> bool:
        """A scheduled or retrying job becomes pending now (it takes the next ready place)."""
        with self._write() as tx:
            recs = self._rows(tx, "id = %s", (job_id,), "FOR UPDATE")
            if not recs or recs[0].job.state not in _DELAYED:
                return False
            lifecycle.run_now(recs[0].job, now)
            self._save(tx, recs[0])  # pending: NOTIFYs the queue's idle workers
            return True

    @retry_transient
    def delete_job(self, job_id: str, now: float) -> bool:
        """Delete a job that is not running; the per-state counts follow."""
        with self._write() as tx:
            recs = self._rows(tx, "id = %s", (job_id,), "FOR UPDATE")
            if not recs or recs[0].job.state is JobState.ACTIVE:
                return False
            job = recs[0].job
            if job.idempotency_key:  # released with the job (fenced: only if still its own)
                tx.conn.execute(
                    self.sql("DELETE FROM {S}.idem WHERE queue = %s AND key = %s AND job_id = %s"),
                    (job.queue, job.idempotency_key, job_id),
                )
            return self._delete(tx, job.queue, str(job.state), "id = %s", (job_id,)) > 0

    @retry_transient
    def clear_queue(self, queue: str, now: float) -> int:
        """Delete the waiting jobs of ``queue`` in one transaction; a row a claimer holds at
        this moment is left to it (``SKIP LOCKED``: it is being claimed, no longer waiting).
        A workflow node is cancelled first, so its dependants end (docs/workflows.md), in
        rounds until none is left: a dependant a cancel released into this queue goes too."""
        where = (
            "rid IN (SELECT rid FROM {S}.jobs WHERE queue = %s AND state = %s"
            " AND id NOT IN (SELECT id FROM {S}.wf_nodes) FOR UPDATE SKIP LOCKED)"
        )  # a node is never deleted here, even one a claimer held during _cancel_nodes
        with self._write() as tx:
            n = 0
            while cancelled := self._cancel_nodes(tx, queue, now):
                n += cancelled
            for state in _WAITING:  # the rows the key release locks are the rows deleted
                release_keys(self, tx, queue, where, (queue, state))  # type: ignore[arg-type]
                n += self._delete(tx, queue, state, where, (queue, state))
            pgflow.forget_queue(self, tx, queue)  # type: ignore[arg-type]  # issue 15
            return n

    def _cancel_nodes(self, tx: Tx, queue: str, now: float) -> int:
        """``clear_queue``: cancel the queue's waiting workflow nodes (as ``cancel`` does one),
        locked in id order, and end or release their dependants; returns how many."""
        where = (
            "queue = %s AND state IN ('pending', 'scheduled', 'retry_scheduled')"
            " AND id IN (SELECT id FROM {S}.wf_nodes) ORDER BY id"
        )
        recs = self._rows(tx, where, (queue,), "FOR UPDATE SKIP LOCKED")
        for rec in recs:
            lifecycle.cancel(rec.job, now)
            self._save(tx, rec)
            tx.emit("cancelled", rec.job, now)
            pgflow.done(self, tx, now, rec.job)  # type: ignore[arg-type]
        return len(recs)

    @retry_transient
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
        from .maintenance import purge_jobs

        return purge_jobs(self, now, state, older_than, queue, ids)  # type: ignore[arg-type]
