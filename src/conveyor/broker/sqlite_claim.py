"""The claim path of the SQLite broker: ``claim`` and the leasing of one row.

A mixin of ``SqliteBroker`` (``sqlite.py``), split from it to keep each duty one screen long.
One ``BEGIN IMMEDIATE`` transaction first does the reaper's work for every queue (due delayed
jobs become pending, expired leases come back), then leases ready rows queue by queue: a flow
group's jobs first (issue 15, ``sqllimits.take``), then the ungrouped ones in ``priority, seq``
order. An undecodable row is dead-lettered (``decode_error``) instead of leased; a row past its
``expires_at`` expires. An empty or short claim reports ``next_due`` over all queues. Methods moved
here, not wrapped: the per-job cost is the same as when they lived in ``sqlite.py``.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial

from ..core import lifecycle
from ..core.job import ErrorKind
from . import sqllimits
from .base import Claimed, Lease
from .sqlflow import SqlFlow
from .sqlite_flow import SqliteDb
from .sqlite_rows import NEXT_DUE, READY, Rec
from .sqlite_store import Tx


class SqliteClaim:
    """``claim`` of ``SqliteBroker`` and its steps (``_lease``, ``_bury_corrupt``,
    ``_next_due``)."""

    supports_flow: bool
    _local: threading.local
    _write: Callable[[], AbstractContextManager[Tx]]
    _rows: Callable[..., list[Rec]]
    _save: Callable[..., None]
    _db: Callable[[Tx], SqliteDb]
    _promote: Callable[[Tx, float, int], int]
    _expire: Callable[[Tx, float, int, int], int]

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
        leases come back (``max_lost`` applies). An empty or short claim reports ``next_due`` over
        all queues (both steps cover every queue, so nothing reported is ever overdue).
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
            short = len(leases) < limit  # drained: the worker waits next (issue 18)
            next_due = self._next_due(tx) if short else None
            if short and flowing:
                next_due = sqllimits.next_due(self._db(tx), now, next_due, served)
        return Claimed.of(leases, next_due, limit=limit)

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
        lifecycle.bury_undecodable(rec.job, now, worker_id)
        self._save(tx, rec)
        tx.emit("dead_lettered", rec.job, now, reason=str(ErrorKind.DECODE_ERROR))
        SqlFlow(self._db(tx), now).done(rec.job)  # a workflow node's dependants end with it
