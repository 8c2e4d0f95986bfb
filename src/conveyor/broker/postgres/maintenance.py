"""Housekeeping of the PostgreSQL backend: inside ``reap_expired``'s transaction the
completed / cancelled TTLs (``Retention``) and folding ``counts_log`` (the count deltas written
by enqueues in callers' transactions) into ``counts``; and ``purge`` (operator deletes) with
``release_keys`` (the idempotency keys of the jobs an operator deletes go with them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...core.state import TERMINAL_STATES, JobState
from .store import Tx

if TYPE_CHECKING:
    from .broker import PostgresBroker

_FINISHED = "queue = %s AND state = %s AND finished_at IS NOT NULL"
#: Like the other backends' rings: drop in finish order up to the first job still within TTL.
_EXPIRED = (
    f"{_FINISHED} AND seq < COALESCE((SELECT seq FROM {{S}}.jobs WHERE {_FINISHED}"
    " AND finished_at > %s ORDER BY seq LIMIT 1), 9223372036854775807)"
)


def drop_expired_finished(b: PostgresBroker, tx: Tx, now: float) -> None:
    """Delete completed and cancelled jobs past their TTL, per queue, oldest first."""
    ttls = (("completed", b.retention.completed_ttl), ("cancelled", b.retention.cancelled_ttl))
    queues = [r[0] for r in tx.conn.execute(b.sql("SELECT name FROM {S}.queues ORDER BY name"))]
    for queue in queues:
        for state, ttl in ttls:
            b._delete(tx, queue, state, _EXPIRED, (queue, state, queue, state, now - ttl))


def fold_counts(b: PostgresBroker, tx: Tx) -> None:
    """Move the committed ``counts_log`` deltas into the transaction's count deltas."""
    rows = tx.conn.execute(
        b.sql(
            "WITH gone AS (DELETE FROM {S}.counts_log RETURNING queue, state, d)"
            " SELECT queue, state, sum(d)::bigint FROM gone GROUP BY queue, state"
        )
    ).fetchall()
    for queue, state, d in rows:
        tx.deltas[queue, state] = tx.deltas.get((queue, state), 0) + int(d)


def purge_jobs(
    b: PostgresBroker,
    now: float,
    state: JobState,
    older_than: float | None,
    queue: str | None,
    ids: Sequence[str] | None,
) -> int:
    """``PostgresBroker.purge``: delete terminal jobs in ``state`` (by age, queue and ids)."""
    if state not in TERMINAL_STATES:
        raise ValueError("purge: only terminal states can be purged")
    where = f"{_FINISHED} AND finished_at <= %s AND (%s::text[] IS NULL OR id = ANY(%s))"
    cutoff = float("inf") if older_than is None else now - older_than
    id_list = None if ids is None else [str(i) for i in ids]
    with b._write() as tx:
        names = [r[0] for r in tx.conn.execute(b.sql("SELECT name FROM {S}.queues"))]
        n = 0
        for q in names if queue is None else [queue]:
            params = (q, str(state), cutoff, id_list, id_list)
            release_keys(b, tx, q, where, params)
            n += b._delete(tx, q, str(state), where, params)
        return n


def release_keys(b: PostgresBroker, tx: Tx, queue: str, where: str, params: Sequence[Any]) -> None:
    """Free the idempotency keys of the jobs ``where`` is about to delete (clear / purge);
    fenced: a key that names another job by now (its TTL ran out, a newer job took it) stays."""
    tx.conn.execute(
        b.sql(
            "DELETE FROM {S}.idem WHERE queue = %s AND job_id IN"
            f" (SELECT id FROM {{S}}.jobs WHERE {where})"
        ),
        (queue, *params),
    )
