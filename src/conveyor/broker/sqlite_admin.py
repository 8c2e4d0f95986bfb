"""Operator actions of the SQLite broker: on one job by id (``cancel``, ``requeue``,
``run_now``, ``delete_job``) and on many (``clear_queue``, ``purge``); ``replace_waiting``
(debounce) is shared: sqllimits.py.

A mixin of ``SqliteBroker``, split from ``sqlite.py`` to keep it short; each is one ``BEGIN
IMMEDIATE`` transaction that reads the job's row, checks its state and writes it back (or
deletes it), so a worker claiming the job at the same moment sees either the old or the new
row, never half of each. A cancelled workflow node ends or releases its dependants in the same
transaction (``SqlFlow``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ..core import lifecycle
from ..core.state import TERMINAL_STATES, JobState
from . import sqllimits
from .sqlflow import SqlFlow
from .sqlite_flow import SqliteDb
from .sqlite_rows import FINISHED, Rec
from .sqlite_store import Tx

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
_CANCELLABLE = (JobState.PENDING, *_DELAYED, JobState.WAITING)
_WAITING = ("pending", "scheduled", "retry_scheduled")  # the states clear_queue empties


class SqliteJobAdmin:
    """The operator actions of ``SqliteBroker`` (see the module docstring)."""

    _write: Callable[[], AbstractContextManager[Tx]]
    _rows: Callable[..., list[Rec]]
    _save: Callable[..., None]
    _delete: Callable[[Tx, str, str, str, Sequence[Any]], int]
    _db: Callable[[Tx], SqliteDb]

    def run_now(self, job_id: str, now: float) -> bool:
        """A scheduled or retrying job becomes pending now (it takes the next ready place)."""
        with self._write() as tx:
            recs = self._rows(tx, "id = ?", (job_id,))
            if not recs or recs[0].job.state not in _DELAYED:
                return False
            lifecycle.run_now(recs[0].job, now)
            self._save(tx, recs[0])
            return True

    def delete_job(self, job_id: str, now: float) -> bool:
        """Delete a job that is not running; the per-state counts follow."""
        with self._write() as tx:
            recs = self._rows(tx, "id = ?", (job_id,))
            if not recs or recs[0].job.state is JobState.ACTIVE:
                return False
            job = recs[0].job
            if job.idempotency_key:  # released with the job (fenced: only if still its own)
                tx.conn.execute(
                    "DELETE FROM idem WHERE queue = ? AND key = ? AND job_id = ?",
                    (job.queue, job.idempotency_key, job_id),
                )
            return self._delete(tx, job.queue, str(job.state), "id = ?", (job_id,)) > 0

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
        """Delete the waiting jobs of ``queue`` in one write transaction; a workflow node is
        cancelled first, so its dependants end (docs/workflows.md), in rounds until none is
        left: a dependant that a cancel released into this queue goes too."""
        where = "queue = ? AND state = ?"
        with self._write() as tx:
            n = 0
            while cancelled := self._cancel_nodes(tx, queue, now):
                n += cancelled
            for state in _WAITING:  # no workflow node waits here any more
                self._release_keys(tx, queue, where, (queue, state))
                n += self._delete(tx, queue, state, where, (queue, state))
            sqllimits.forget_queue(self._db(tx), queue)  # issue 15: its groups go with its jobs
            return n

    def _cancel_nodes(self, tx: Tx, queue: str, now: float) -> int:
        """``clear_queue``: cancel the queue's waiting workflow nodes (``cancel`` does the
        same to one) and end or release their dependants; returns how many."""
        marks = ",".join("?" * len(_WAITING))
        where = f"queue = ? AND state IN ({marks}) AND id IN (SELECT id FROM wf_nodes)"
        recs = self._rows(tx, where, (queue, *_WAITING))
        for rec in recs:
            lifecycle.cancel(rec.job, now)
            self._save(tx, rec)
            tx.emit("cancelled", rec.job, now)
            SqlFlow(self._db(tx), now).done(rec.job)
        return len(recs)

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
            f"{FINISHED} AND finished_at <= ? AND (? IS NULL OR id IN"
            " (SELECT value FROM json_each(?)))"
        )
        cutoff = float("inf") if older_than is None else now - older_than
        with self._write() as tx:
            names = [r[0] for r in tx.conn.execute("SELECT name FROM queues")]
            n = 0
            for q in names if queue is None else [queue]:
                params = (q, str(state), cutoff, id_list, id_list)
                self._release_keys(tx, q, where, params)
                n += self._delete(tx, q, str(state), where, params)
            return n

    @staticmethod
    def _release_keys(tx: Tx, queue: str, where: str, params: Sequence[Any]) -> None:
        """Free the idempotency keys of the jobs ``where`` is about to delete; fenced: a key
        that names another job by now (its TTL ran out and a newer job took it) stays."""
        tx.conn.execute(
            f"DELETE FROM idem WHERE queue = ? AND job_id IN (SELECT id FROM jobs WHERE {where})",
            (queue, *params),
        )
