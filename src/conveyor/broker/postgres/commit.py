"""What every PostgreSQL write transaction settles just before COMMIT, in two statements.

1. ``_FOLD`` (only when the transaction has events): take the events of enqueues committed in
   callers' transactions (``events_pending``, numbered first) and reserve gap-free numbers for
   them and this transaction's events by bumping the ``meta`` counter row. That row lock orders
   committers, so event cursors never skip an event.
2. ``_APPLY``: insert the numbered event chunks, apply every count delta (one upsert over
   sorted keys: every transaction locks count rows in the same order, no deadlock) and send
   every NOTIFY (delivered only at COMMIT), all from arrays in one statement.

Then, only when needed: cap the finished jobs this transaction touched (``Retention``) and
trim old event rows (amortised).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from .arrays import bytea_array, num_array, text_array
from .store import EVENT_CHUNK, EVENT_TRIM, Tx, one

if TYPE_CHECKING:
    from .arrays import bytea_array, num_array, text_array
from .store import PgStore

_FOLD = (
    "WITH gone AS (DELETE FROM {S}.events_pending RETURNING id, body), bump AS (UPDATE"
    " {S}.meta SET n = n + %s + COALESCE((SELECT sum(jsonb_array_length(convert_from(body,"
    " 'UTF8')::jsonb)) FROM gone), 0) WHERE key = 'event' RETURNING n)"
    " SELECT (SELECT n FROM bump), ARRAY(SELECT body FROM gone ORDER BY id)"
)
_APPLY = (
    "WITH ev AS (INSERT INTO {S}.events (last, n, body) SELECT * FROM unnest(%s::bigint[],"
    " %s::int[], %s::bytea[])), cn AS (INSERT INTO {S}.counts (queue, state, n) SELECT * FROM"
    " unnest(%s::text[], %s::text[], %s::bigint[]) ON CONFLICT (queue, state) DO UPDATE SET"
    " n = {S}.counts.n + excluded.n RETURNING queue, state, n), nt AS (SELECT pg_notify(c, q)"
    " FROM unnest(%s::text[], %s::text[]) AS t(c, q))"
    " SELECT (SELECT count(*) FROM nt), ARRAY(SELECT queue FROM cn), ARRAY(SELECT state FROM"
    " cn), ARRAY(SELECT n FROM cn)"
)
_CAP = (
    "DELETE FROM {S}.jobs WHERE rid IN (SELECT rid FROM {S}.jobs WHERE queue = %s AND state = %s"
    " AND finished_at IS NOT NULL ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED)"
)


def settle(s: PgStore, tx: Tx) -> None:
    """Number and store the events, apply the count deltas, send the NOTIFYs, then retention."""
    events = _number_events(s, tx)
    deltas = sorted((k, d) for k, d in tx.deltas.items() if d)
    tx.deltas.clear()
    notes = [(s.channel, q) for q in sorted(tx.notify)]
    notes += [(s.done_channel, q) for q in sorted(tx.done)]
    if not (events or deltas or notes):
        return
    _, queues, states, ns = one(
        tx.conn.execute(
            s.sql(_APPLY),
            (
                num_array([last for last, _, _ in events]),
                num_array([n for _, n, _ in events]),
                bytea_array([body for _, _, body in events]),
                text_array([q for (q, _), _ in deltas]),
                text_array([st for (_, st), _ in deltas]),
                num_array([d for _, d in deltas]),
                text_array([c for c, _ in notes]),
                # "" (a name too long for a payload) wakes every waiter
                text_array([q if len(q.encode()) < 7000 else "" for _, q in notes]),
            ),
            prepare=True,
        )
    )
    totals = {(q, st): int(n) for q, st, n in zip(queues, states, ns, strict=True)}
    _cap_finished(s, tx, totals)


def _number_events(s: PgStore, tx: Tx) -> list[tuple[int, int, bytes]]:
    """The event chunk rows (last number, count, body) to insert; trims old rows now and then."""
    if not tx.events:
        return []
    keep = s.retention.events_max
    last, early = one(tx.conn.execute(s.sql(_FOLD), (len(tx.events),), prepare=True))
    if early:
        tx.events[:0] = [e for body in early for e in orjson.loads(body)]
    if (last - len(tx.events)) // EVENT_TRIM != last // EVENT_TRIM:  # amortised trim
        tx.conn.execute(s.sql("DELETE FROM {S}.events WHERE last <= %s"), (last - keep,))
    events = tx.events[-keep:] if keep > 0 else []
    first = last - len(events) + 1
    return [
        (first + i + len(chunk) - 1, len(chunk), orjson.dumps(chunk))
        for i in range(0, len(events), EVENT_CHUNK)
        for chunk in [events[i : i + EVENT_CHUNK]]
    ]


def _cap_finished(s: PgStore, tx: Tx, totals: dict[tuple[str, str], int]) -> None:
    """Delete the oldest finished jobs over the per-queue caps (``Retention``)."""
    for queue, state in sorted(tx.finished):
        r = s.retention
        cap = r.completed_max if state == "completed" else r.dead_letter_max
        excess = totals.get((queue, state), 0) - max(cap, 0)
        if excess > 0:
            n = tx.conn.execute(s.sql(_CAP), (queue, state, excess)).rowcount
            tx.conn.execute(
                s.sql("UPDATE {S}.counts SET n = n - %s WHERE queue = %s AND state = %s"),
                (n, queue, state),
            )
