"""The claim transaction of the PostgreSQL backend (``PostgresBroker.claim``).

One round trip looks up everything the claim needs before it starts (``_LOOKUP``: the earliest
delayed run_at and lease deadline, the paused queues); due delayed jobs and expired leases are
handled only when there are some. Then, per queue in the order given, ONE statement picks,
locks and leases a batch (``_CLAIM``: ``UPDATE … FROM (SELECT … ORDER BY priority, seq LIMIT n
FOR UPDATE SKIP LOCKED) … RETURNING``). It writes the lease into the row's columns (state, lease
deadline, a fencing token from ``gen_random_uuid()``, the claim overlay ``claims``,
``started_at``, ``worker``) and leaves the envelope untouched (``postgres/rec.py``), so no
per-job statement follows a claim. Only an undecodable row costs one more write (it is
dead-lettered as ``decode_error``).

Plans: the claim must walk ``jobs_ready`` in index order and stop after n rows whatever the
statistics say. A freshly filled table has none (autovacuum analyzes it a minute later), and the
planner then estimates two pending rows and chooses a bitmap scan of EVERY pending row plus a
sort: the cost grows with the backlog (docs/architecture-postgres.md, "Claim"). The look-up
therefore turns bitmap scans off for the claim's transaction (``set_config(…, true)``), which
leaves the ordered index scan as the cheap plan. Expired leases are found through
``jobs_lease`` alone: ``lease_at`` is set only on active rows, and a ``state = 'active'``
condition made the planner AND in ``jobs_state_created``, whose dead entries bitmap scans never
clean up (thousands read per claim mid-drain).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...core import lifecycle
from ...core.job import ErrorKind
from ...core.state import JobState
from ..base import Claimed, Lease
from ..sqlite_rows import Rec
from .rec import COLS, pg_rec
from .store import Tx, one

if TYPE_CHECKING:
    from .broker import PostgresBroker

_LOOKUP = (
    "SELECT set_config('enable_bitmapscan', 'off', true),"
    " (SELECT min(due_at) FROM {S}.jobs WHERE due_at IS NOT NULL),"
    " (SELECT min(lease_at) FROM {S}.jobs WHERE lease_at IS NOT NULL),"
    " ARRAY(SELECT name FROM {S}.queues WHERE paused)"
)
_RETURNED = ", ".join(f"j.{c.strip()}" for c in COLS.split(","))
#: Pick, lock and lease up to n ready rows of one queue; the envelope is not rewritten.
_CLAIM = (
    "WITH picked AS (SELECT rid, seq FROM {S}.jobs WHERE queue = %s AND state = 'pending'"
    " ORDER BY priority, seq LIMIT %s FOR UPDATE SKIP LOCKED)"
    " UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s,"
    " token = replace(gen_random_uuid()::text, '-', ''), claims = j.claims + 1,"
    f" started_at = %s, worker = %s FROM picked WHERE j.rid = picked.rid RETURNING {_RETURNED},"
    " picked.seq, j.token"
)
_NEXT_DUE = (
    "SELECT (SELECT min(due_at) FROM {S}.jobs WHERE due_at IS NOT NULL),"
    " (SELECT min(lease_at) FROM {S}.jobs WHERE lease_at IS NOT NULL)"
)


def _earliest(*times: float | None) -> float | None:
    found = [float(t) for t in times if t is not None]
    return min(found) if found else None


def claim_jobs(
    b: PostgresBroker,
    queues: Sequence[str],
    now: float,
    limit: int,
    vt: float,
    worker_id: str,
    max_lost: int,
) -> Claimed:
    """``PostgresBroker.claim`` (see the module docstring)."""
    leases: list[Lease] = []
    with b._write() as tx:
        _, due, lease_end, paused = one(tx.conn.execute(b.sql(_LOOKUP), prepare=True))
        moved = 0
        if due is not None and due <= now:
            moved += b._promote(tx, now, 1000)
        if lease_end is not None and lease_end <= now:
            moved += b._expire(tx, now, max_lost, 1000)
        for queue in (q for q in queues if q not in set(paused)):
            while len(leases) < limit:
                got = _claim_rows(b, tx, queue, limit - len(leases), now, vt, worker_id)
                leases.extend(got)
                if not got:
                    break
        next_due = None
        if not leases:
            if moved:
                due, lease_end = one(tx.conn.execute(b.sql(_NEXT_DUE)))
            next_due = _earliest(due, lease_end)
    return Claimed.of(leases, next_due)


def _claim_rows(
    b: PostgresBroker, tx: Tx, queue: str, n: int, now: float, vt: float, worker_id: str
) -> list[Lease]:
    """One claim statement; its leases in claim order (priority, then the old place)."""
    rows = tx.conn.execute(
        b.sql(_CLAIM), (queue, n, now + vt, now, worker_id or None), prepare=True
    ).fetchall()
    if not rows:
        return []
    rows.sort(key=lambda r: (r[5], r[15]))  # RETURNING has no order: priority, old seq
    tx.count(queue, "pending", "active", len(rows))
    leases: list[Lease] = []
    for row in rows:
        rec = pg_rec(row[:15])
        if rec.corrupt is not None:
            bury_corrupt(b, tx, rec, now, worker_id)
            continue
        tx.emit("started", rec.job, now, attempt=rec.job.attempts, worker=worker_id)
        leases.append(Lease(rec.job, row[16], now + vt))
    return leases


def bury_corrupt(b: PostgresBroker, tx: Tx, rec: Rec, now: float, worker_id: str) -> None:
    """An undecodable row: active → dead_letter with kind ``decode_error``; bytes kept."""
    rec.job.state = JobState.ACTIVE
    error = {
        "kind": str(ErrorKind.DECODE_ERROR),
        "type": "DecodeError",
        "traceback": "",
        "message": str(rec.job.metadata.get("decode_error")),
        "worker": worker_id or None,
        "at": now,
    }
    lifecycle.fail(rec.job, now, error, None)
    b._save(tx, rec)
    tx.emit("dead_lettered", rec.job, now, reason=str(ErrorKind.DECODE_ERROR))
