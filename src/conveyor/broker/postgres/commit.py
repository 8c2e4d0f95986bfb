"""What every PostgreSQL write transaction settles at COMMIT, in one statement.

``_SETTLE`` (``_APPLY`` when the transaction has no events):

1. takes the events of enqueues committed in callers' transactions (``events_pending``) and
   reserves gap-free numbers for them and this transaction's events by bumping the ``meta``
   counter row (that row lock orders committers, so event cursors never skip an event); the
   pending ones are stored as their own rows, numbered first, this transaction's events in
   chunks numbered after them (their numbers relative to the bump, so no round trip is needed
   to learn them); old event rows are trimmed when the counter crosses a multiple of
   ``EVENT_TRIM``;
2. applies every count delta (one upsert over sorted keys: every transaction locks count rows
   in the same order, no deadlock);
3. sends every NOTIFY (delivered only at COMMIT).

When the transaction finished no job (a claim, an enqueue) the statement and COMMIT travel in
one round trip (psycopg pipeline mode). Otherwise the retention caps may have to delete the
oldest finished jobs first (``_cap_finished``, in the same transaction), then COMMIT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .arrays import bytea_array, num_array, text_array
from .store import EVENT_CHUNK, EVENT_TRIM, Tx, one

if TYPE_CHECKING:
    from .store import PgStore

_COUNTS_NOTIFY = (
    " cn AS (INSERT INTO {S}.counts (queue, state, n) SELECT * FROM unnest(%(q)s::text[],"
    " %(st)s::text[], %(d)s::bigint[]) ON CONFLICT (queue, state) DO UPDATE SET"
    " n = {S}.counts.n + excluded.n RETURNING queue, state, n),"
    " nt AS (SELECT pg_notify(c, q) FROM unnest(%(ch)s::text[], %(nq)s::text[]) AS t(c, q))"
    " SELECT (SELECT count(*) FROM nt), ARRAY(SELECT queue FROM cn), ARRAY(SELECT state FROM"
    " cn), ARRAY(SELECT n FROM cn)"
)
#: Counts and NOTIFYs only (a transaction without events).
_APPLY = "WITH" + _COUNTS_NOTIFY
#: Events numbered and stored (pending ones first), trimmed now and then, counts, NOTIFYs.
_SETTLE = (
    "WITH gone AS (DELETE FROM {S}.events_pending RETURNING id, body),"
    " early AS (SELECT id, body, jsonb_array_length(convert_from(body, 'UTF8')::jsonb) AS m"
    " FROM gone), e AS (SELECT COALESCE(sum(m), 0)::bigint AS m FROM early),"
    " bump AS (UPDATE {S}.meta SET n = n + %(k)s::bigint + (SELECT m FROM e)"
    " WHERE key = 'event' RETURNING n),"
    " ev0 AS (INSERT INTO {S}.events (last, n, body) SELECT b.n - %(k)s::bigint - ((SELECT m"
    " FROM e) - sum(x.m) OVER (ORDER BY x.id)), x.m, x.body FROM early x, bump b"
    " WHERE x.m > 0 AND %(keep)s::bigint > 0),"
    " ev AS (INSERT INTO {S}.events (last, n, body) SELECT b.n - %(k)s::bigint + r.rel, r.cnt,"
    " r.body FROM unnest(%(rel)s::bigint[], %(cnt)s::int[], %(body)s::bytea[])"
    " AS r(rel, cnt, body), bump b),"
    " tr AS (DELETE FROM {S}.events WHERE last <= (SELECT n FROM bump) - %(keep)s::bigint"
    f" AND (SELECT (b.n - %(k)s::bigint - e.m) / {EVENT_TRIM} <> b.n / {EVENT_TRIM}"
    " FROM bump b, e))," + _COUNTS_NOTIFY
)
_CAP = (
    "DELETE FROM {S}.jobs WHERE rid IN (SELECT rid FROM {S}.jobs WHERE queue = %s AND state = %s"
    " AND finished_at IS NOT NULL ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED)"
)


def settle(s: PgStore, tx: Tx) -> None:
    """Number and store the events, apply the count deltas, send the NOTIFYs, retention, and
    COMMIT a transaction ``PgStore._write`` began (nothing to do: nothing sent)."""
    found = statement(s, tx)
    if found is None:
        if tx.begun or tx.deferred:
            tx.conn.execute("COMMIT")
        return
    sql, params = found
    if not tx.finished:  # no retention cap to apply: the statement and COMMIT in one trip
        with tx._conn.pipeline():
            tx.send_pending()
            tx._conn.execute(sql, params, prepare=True)
            tx._conn.execute("COMMIT")
        return
    _, queues, states, ns = one(tx.first(sql, params))
    totals = {(q, st): int(n) for q, st, n in zip(queues, states, ns, strict=True)}
    _cap_finished(s, tx, totals)
    tx.conn.execute("COMMIT")


def statement(s: PgStore, tx: Tx) -> tuple[str, dict[str, Any]] | None:
    """The settle statement of ``tx`` (``_SETTLE`` or ``_APPLY``, schema bound; it begins with
    ``WITH``) and its named parameters; None when there is nothing to settle. Takes the count
    deltas out of ``tx``."""
    deltas = sorted((k, d) for k, d in tx.deltas.items() if d)
    tx.deltas.clear()
    notes = [(s.channel, q) for q in sorted(tx.notify)]
    notes += [(s.done_channel, q) for q in sorted(tx.done)]
    if not (tx.events or deltas or notes):
        return None
    params: dict[str, Any] = {
        "q": text_array([q for (q, _), _ in deltas]),
        "st": text_array([st for (_, st), _ in deltas]),
        "d": num_array([d for _, d in deltas]),
        "ch": text_array([c for c, _ in notes]),
        # "" (a name too long for a payload) wakes every waiter
        "nq": text_array([q if len(q.encode()) < 7000 else "" for _, q in notes]),
    }
    if not tx.events:
        return s.sql(_APPLY), params
    return s.sql(_SETTLE), params | _chunks(tx.events, s.retention.events_max)


def _chunks(events: list[dict[str, Any]], keep: int) -> dict[str, Any]:
    """``_SETTLE``'s event parameters: the chunks of the last ``keep`` events, each numbered
    by its last event's place among ``events`` (1-based; the bump adds the base)."""
    kept = events[-keep:] if keep > 0 else []
    skip = len(events) - len(kept)
    chunks = [kept[i : i + EVENT_CHUNK] for i in range(0, len(kept), EVENT_CHUNK)]
    return {
        "k": len(events),
        "keep": keep,
        "rel": num_array([skip + i * EVENT_CHUNK + len(c) for i, c in enumerate(chunks)]),
        "cnt": num_array([len(c) for c in chunks]),
        "body": bytea_array([orjson.dumps(c) for c in chunks]),
    }


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
