"""Timers and retention of the SQLite broker: due delayed jobs, expired leases, finished-job
TTLs (``promote_due``, ``reap_expired``).

A mixin of ``SqliteBroker`` (``sqlite.py``), split from it to keep each duty one screen long.
``_promote`` and ``_expire`` also run at the start of every claim (sqlite_claim.py), so a due
job or an expired lease is claimable without waiting for the reaper. The per-queue caps of
finished jobs (``completed_max`` / ``dead_letter_max``) are applied at each commit instead
(``SqliteBroker._before_commit``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..config import Retention
from ..core import lifecycle
from ..core.state import JobState
from .sqlflow import SqlFlow
from .sqlite_flow import SqliteDb
from .sqlite_rows import FINISHED, Rec
from .sqlite_store import Tx


class SqliteMaintenance:
    """``promote_due`` and ``reap_expired`` of ``SqliteBroker``, and their steps."""

    retention: Retention
    _write: Callable[[], AbstractContextManager[Tx]]
    _rows: Callable[..., list[Rec]]
    _save: Callable[..., None]
    _delete: Callable[[Tx, str, str, str, Sequence[Any]], int]
    _db: Callable[[Tx], SqliteDb]
    _housekeep_side: Callable[[Tx, float], None]
    sweep_workflows: Callable[[Any, float], int]

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
                    f"{FINISHED} AND seq < COALESCE((SELECT seq FROM"
                    f" jobs WHERE {FINISHED} AND finished_at > ? ORDER BY seq LIMIT 1),"
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
