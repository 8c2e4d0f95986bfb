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
3. sends every NOTIFY (delivered only at COMMIT); the "done" channel's only while a waiters'
   listener exists (it holds an advisory lock, shared, that the statement then fails to take:
   ``postgres/waits.py``), since PostgreSQL wakes every LISTENing backend of the database at
   each NOTIFY, and each woken backend runs a transaction to read it.

The statement and COMMIT travel in one round trip, on libpq's pipeline directly
(``postgres/wire.py``: nobody reads their results). When the
transaction finished jobs, the retention caps (``Retention.completed_max`` /
``dead_letter_max``) ride in the same round trip as a statement of their own (``_CAP``),
sent between the settle statement and COMMIT: it reads the per-queue totals the settle
statement just wrote (count rows this transaction now holds locked, so no other committer can
move them before COMMIT), deletes the oldest finished jobs over the cap and takes them off the
counts. The client never waits on the totals (issue 17: a completion is two round trips, not
three).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from . import wire
from .arrays import bytea_binary, num_array, text_array
from .store import EVENT_CHUNK, EVENT_TRIM, Tx

if TYPE_CHECKING:
    from .store import PgStore

_COUNTS_NOTIFY = (
    " cn AS (INSERT INTO {S}.counts (queue, state, n) SELECT * FROM unnest(%(q)s::text[],"
    " %(st)s::text[], %(d)s::bigint[]) ON CONFLICT (queue, state) DO UPDATE SET"
    " n = {S}.counts.n + excluded.n RETURNING queue, state, n),"
    # the done channel only while a waiters' listener holds its lock (shared): the try for it
    # fails (postgres/waits.py; a NOTIFY wakes every LISTENing backend of the database)
    " nt AS (SELECT pg_notify(c, q) FROM unnest(%(ch)s::text[], %(nq)s::text[]) AS t(c, q)"
    " WHERE CASE WHEN c = %(dc)s THEN NOT pg_try_advisory_xact_lock(%(dk)s::bigint)"
    " ELSE true END)"
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
#: The retention caps of the finished (queue, state) pairs: each pair's total over its cap
#: (the count row the settle statement just updated, locked by this transaction) deletes that
#: many of the oldest finished rows (``jobs_finished``; ``SKIP LOCKED``: a row another
#: transaction holds is left for a later pass) and comes off the count.
_CAP = (
    "WITH f AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS f(q, st, cap)),"
    " x AS (SELECT f.q, f.st, c.n - f.cap AS over FROM f JOIN {S}.counts c ON c.queue = f.q"
    " AND c.state = f.st WHERE c.n > f.cap),"
    " gone AS (DELETE FROM {S}.jobs WHERE rid IN (SELECT p.rid FROM x CROSS JOIN LATERAL"
    " (SELECT rid FROM {S}.jobs WHERE queue = x.q AND state = x.st AND finished_at IS NOT NULL"
    " ORDER BY seq LIMIT x.over FOR UPDATE SKIP LOCKED) p) RETURNING queue, state)"
    " UPDATE {S}.counts c SET n = c.n - g.k FROM (SELECT queue, state, count(*) AS k FROM gone"
    " GROUP BY queue, state) g WHERE c.queue = g.queue AND c.state = g.state"
)


def settle(s: PgStore, tx: Tx) -> None:
    """Number and store the events, apply the count deltas, send the NOTIFYs, apply the
    retention caps, and COMMIT a transaction ``PgStore._write`` began, in one round trip
    (nothing to do: nothing sent)."""
    caps = _caps(s, tx)
    found = statement(s, tx)
    if found is None:
        if tx.begun or tx.deferred:
            tx.conn.execute("COMMIT")
        return
    batch: list[tuple[str, Any]] = [] if tx.begun else [("BEGIN", ())]
    batch += [*tx.deferred, found]
    if caps is not None:
        batch.append((s.sql(_CAP), caps))
    batch.append(("COMMIT", ()))
    tx.deferred.clear()
    tx.begun = True
    if wire.encodable(batch):  # the usual case: straight on libpq's pipeline
        wire.fire(tx._conn, batch)
        return
    with tx._conn.pipeline():
        for sql, params in batch:
            tx._conn.execute(sql, params, prepare=sql not in ("BEGIN", "COMMIT"))


def _caps(s: PgStore, tx: Tx) -> tuple[str, str, str] | None:
    """``_CAP``'s parameters: the finished (queue, state) pairs whose count this transaction
    changes (the settle statement locks their rows) and their caps; None when there is none."""
    pairs = sorted(k for k in tx.finished if tx.deltas.get(k))
    if not pairs:
        return None
    r = s.retention
    caps = [max(r.completed_max if st == "completed" else r.dead_letter_max, 0) for _, st in pairs]
    return (text_array([q for q, _ in pairs]), text_array([st for _, st in pairs]), num_array(caps))


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
        "dc": s.done_channel,
        "dk": s.done_key,
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
        "body": bytea_binary([orjson.dumps(c) for c in chunks]),
    }
