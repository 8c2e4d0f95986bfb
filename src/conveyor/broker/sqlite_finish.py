"""The lease holder's transitions of the SQLite broker: ``complete`` here; fail, release,
cancel_running and extend are shared with PostgreSQL (``sqlfinish.py``).

A mixin of ``SqliteBroker`` (``sqlite.py``), split from it to keep each duty one screen long.
Each call is one ``BEGIN IMMEDIATE`` transaction that finds the row only while the caller's
lease still holds (``_leased``: active, same fencing token), applies the pure
``core.lifecycle`` function and writes the row back; a workflow node's dependants are ended or
released in the same transaction (``SqlFlow``, sqlflow.py). Methods moved here, not wrapped:
the per-job cost is the same as when they lived in ``sqlite.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from ..core import lifecycle
from ..core.job import Job
from .base import Ack
from .sqlfinish import SqlLeaseTransitions
from .sqlflow import SqlFlow
from .sqlite_flow import SqliteDb
from .sqlite_rows import Rec
from .sqlite_store import Tx


class SqliteFinish(SqlLeaseTransitions):
    """``complete`` of ``SqliteBroker`` (the other lease-holder transitions: sqlfinish.py)."""

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

    def _flow_done(self, tx: Tx, now: float, job: Job) -> None:
        """A terminal job's workflow dependants (sqlflow.py)."""
        SqlFlow(self._db(tx), now).done(job)
