"""Operator actions of the SQLite broker that act on one job by id: ``run_now`` and
``delete_job`` (``replace_waiting``, debounce, is shared: sqllimits.py).

Split from ``sqlite.py`` to keep it short; each is one ``BEGIN IMMEDIATE`` transaction that
reads the job's row, checks its state and writes it back (or deletes it), so a worker claiming
the job at the same moment sees either the old or the new row, never half of each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..core import lifecycle
from ..core.state import JobState
from .sqlite_rows import Rec
from .sqlite_store import Tx

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)


class SqliteJobAdmin:
    """``run_now`` and ``delete_job`` of ``SqliteBroker``."""

    _write: Callable[[], AbstractContextManager[Tx]]
    _rows: Callable[..., list[Rec]]
    _save: Callable[..., None]
    _delete: Callable[[Tx, str, str, str, Sequence[Any]], int]

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
            return self._delete(tx, job.queue, str(job.state), "id = ?", (job_id,)) > 0
