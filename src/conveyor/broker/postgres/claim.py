"""The claim transaction of the PostgreSQL backend (``PostgresBroker.claim``).

One round trip sends BEGIN, looks up everything the claim needs (``_LOOKUP``: the earliest
delayed run_at and lease deadline, the paused queues, whether flow groups exist) and already
claims from the first queue (``_GUARDED``: ``_CLAIM`` that takes nothing when the look-up's
answers must be acted on first; not sent while this process sees flow groups); due delayed jobs
and expired leases are handled only when there are some. Then, per queue in the order given,
ONE statement picks, locks and leases a batch (``_CLAIM``: ``UPDATE … FROM (SELECT … ORDER BY
priority, seq LIMIT n FOR UPDATE SKIP LOCKED) … RETURNING``). It writes the lease into the
row's columns (state, lease deadline, a fencing token from ``gen_random_uuid()``, the claim
overlay ``claims``, ``started_at``, ``worker``) and leaves the envelope untouched
(``postgres/rec.py``), so no per-job statement follows a claim. Only an undecodable row costs
one more write (it is dead-lettered as ``decode_error``), and so does a row past its
``expires_at`` (it expires). A claim that comes back short (fewer leases than ``limit``) read
every served queue to the end: it reports ``next_due`` from the look-up and is ``drained``
(issue 18), so the worker waits instead of claiming again at once.

Flow control (issue 15): ``_CLAIM`` takes only ungrouped rows (``grp IS NULL``, the
``jobs_ready`` index); a flow group's jobs go first, through ``pgflow.take`` under the flow
lock, leased per batch by ``lease_many`` with the same overlay as ``_CLAIM`` (one statement;
a lapsed or undecodable head goes through ``lease_one``). The look-up also
tells whether any flow group exists: without one the claim never takes the flow lock; while
this process sees groups, the look-up takes it (``_LOOKUP_LOCKED``: no statement of its own).

Durability: the claim's COMMIT does not wait for its WAL to reach disk (``synchronous_commit =
off`` for this transaction only, set by the look-up): a claim lost in a server crash leaves the
job pending, to be claimed again, which is what a lost lease does anyway (at-least-once); the
job's completion, and every enqueue, still commit synchronously (and flush the claim's WAL with
theirs). This takes one disk flush out of the pickup path (enqueue → NOTIFY → claim → start).

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

import secrets
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ...core import lifecycle
from ...core.job import ErrorKind
from ...core.state import JobState
from ..base import Claimed, Lease
from ..sqlite_rows import Rec
from . import flow as pgflow  # issue 15/16 hooks
from .arrays import num_array
from .rec import COLS, claimed_job, pg_rec
from .store import Tx, one

if TYPE_CHECKING:
    from .broker import PostgresBroker

_LOOKUP = (
    "SELECT set_config('enable_bitmapscan', 'off', true),"
    " set_config('synchronous_commit', 'off', true),"
    " (SELECT min(due_at) FROM {S}.jobs WHERE due_at IS NOT NULL),"
    " (SELECT min(lease_at) FROM {S}.jobs WHERE lease_at IS NOT NULL),"
    " ARRAY(SELECT name FROM {S}.queues WHERE paused),"
    " EXISTS (SELECT 1 FROM {S}.flow_groups), EXISTS (SELECT 1 FROM {S}.flow_pending)"
)
#: ``_LOOKUP`` that also takes the flow lock (issue 15): sent while this process sees flow
#: groups, whose claim would take it next anyway (one round trip fewer per fair claim).
_LOOKUP_LOCKED = _LOOKUP + ", " + pgflow.LOCK_SQL
_RETURNED = ", ".join(f"j.{c.strip()}" for c in COLS.split(","))
#: Pick, lock and lease up to n ready rows of one queue; the envelope is not rewritten. Only
#: ungrouped rows (``jobs_ready``): a flow group's jobs go through ``pgflow.take`` (issue 15).
#: The pause is tested here, in the statement's own snapshot: a pause that commits after the
#: look-up (which chose the served queues) and before this statement, followed by a new job,
#: must not see that job leased.
_CLAIM = (
    "WITH picked AS (SELECT rid, seq FROM {S}.jobs WHERE queue = %s AND state = 'pending'"
    " AND grp IS NULL AND NOT EXISTS (SELECT 1 FROM {S}.queues WHERE name = %s AND paused)"
    " ORDER BY priority, seq LIMIT %s FOR UPDATE SKIP LOCKED)"
    " UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s,"
    " token = replace(gen_random_uuid()::text, '-', ''), claims = j.claims + 1,"
    f" started_at = %s, worker = %s FROM picked WHERE j.rid = picked.rid RETURNING {_RETURNED},"
    " picked.seq, j.token"
)
#: ``_CLAIM`` of the first queue sent with the look-up (one round trip), guarded: it takes
#: nothing when the queue is paused, a delayed job is due, a lease expired or a flow group
#: exists, i.e. whenever the look-up's answers must be acted on first (then the claim goes
#: the usual way). Its parameters: the queue, the queue, now, now, then ``_CLAIM``'s.
_GUARDED = _CLAIM.replace(
    " AND paused) ORDER BY",
    " AND paused)"
    # the earliest deadlines as the look-up reads them (an index's first entry; a range test
    # let a generic plan scan the table for a row that is not there)
    " AND COALESCE((SELECT min(due_at) FROM {S}.jobs WHERE due_at IS NOT NULL) > %s, true)"
    " AND COALESCE((SELECT min(lease_at) FROM {S}.jobs WHERE lease_at IS NOT NULL) > %s, true)"
    " AND NOT EXISTS (SELECT 1 FROM {S}.flow_groups)"
    " AND NOT EXISTS (SELECT 1 FROM {S}.flow_pending) ORDER BY",
)
#: Lease the heads ``pgflow.take`` picked and locked (issue 15) like ``_CLAIM`` does: the claim
#: overlay, the envelope untouched; one statement per batch of groups. The state test is
#: written ``IS TRUE`` so that no plan can use it to enter an index on ``state``: a generic
#: plan made while the statistics said almost no job was pending (ANALYZE after a drain)
#: walked every pending job through ``jobs_state_created`` per claim.
_LEASE = (
    "UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s,"
    " token = replace(gen_random_uuid()::text, '-', ''), claims = j.claims + 1,"
    " started_at = %s, worker = %s WHERE j.rid = ANY(%s::bigint[])"
    " AND (j.state = 'pending') IS TRUE"
    " RETURNING j.rid, j.token"
)
#: The batch size written INTO the claim statement's text (``LIMIT 32``): the worker's claim
#: batch at the default concurrency (``worker/slots.py`` ``MIN_BATCH``; two thirds of a default
#: drain's claims). Any other size goes as a parameter (one text for all). A parameterised LIMIT
#: is estimated at 10 % of the rows, so over a backlog the generic plan looked far costlier than
#: a custom one (a hash join over all of ``jobs``) and the plan cache planned the claim again
#: at EVERY call: ~180 µs of server CPU per claim, 5.6 µs per job in batches of 32
#: (``bench/pg_statements.py``). With the size written in, the generic plan is the custom one
#: and the cache keeps it after five custom plans (``tests/postgres/test_claim_generic.py``).
#: One size only: each text is planned five times on each pooled connection before its
#: generic plan is kept, so a text per size (1…32) cost more than it saved in a 20,000-job
#: drain; a larger batch spreads its planning over more jobs (0.4 µs per job at 500).
LITERAL_SIZE = 32
_SIZED: dict[tuple[str, int], str] = {}


def _sized(b: PostgresBroker, sql: str, n: int) -> tuple[str, bool]:
    """``sql`` (``_CLAIM`` / ``_GUARDED``) for a batch of ``n``, schema bound; True when its
    ``LIMIT %s`` was written as ``LIMIT n`` (``n == LITERAL_SIZE``: the caller then leaves
    ``n`` out of the parameters)."""
    if n != LITERAL_SIZE:
        return b.sql(sql), False
    text = _SIZED.get((sql, n))
    if text is None:
        text = _SIZED[sql, n] = sql.replace("LIMIT %s", f"LIMIT {int(n)}", 1)
    return b.sql(text), True


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
        # BEGIN, the look-up and the first queue's guarded claim: one round trip (not while
        # flow groups exist: the guard would refuse, a statement for nothing)
        head = queues[0] if queues and not b.flow_seen else ""
        if head:
            guarded, fixed = _sized(b, _GUARDED, limit)
            size = () if fixed else (limit,)
            look, first = tx.first_two(
                (b.sql(_LOOKUP), ()),
                (guarded, (head, head, now, now, *size, now + vt, now, worker_id or None)),
            )
            took, leases = _lease_rows(b, tx, head, first, now, vt, worker_id)
            looked = look[0]
        elif b.flow_seen:  # issue 15: the flow lock rides with the look-up
            looked, took, leases = _flow_look_up(b, tx, queues, now, limit, vt, worker_id)
        else:
            looked, took = one(tx.first(b.sql(_LOOKUP))), 0
        _, _, due, lease_end, paused, *seen = looked  # (the lock's void comes last)
        b.flow_seen = bool(seen[0] or seen[1])
        # a short batch: that queue is empty (of ungrouped jobs: a fair batch says nothing)
        done = {head} if head and 0 < took < limit else set()
        moved = 0
        if due is not None and due <= now:
            moved += b._promote(tx, now, 1000)
        if lease_end is not None and lease_end <= now:
            moved += b._expire(tx, now, max_lost, 1000)
        # issue 15: a flow group seen (or just made due by a promotion or an expired lease):
        # the flow lock and the groups' bookkeeping; the unlimited path never pays for them
        flowing = pgflow.flowing(b, tx, None if moved else (seen[0], seen[1]))
        lease = partial(lease_many, b, tx, now, vt, worker_id)
        served = [q for q in queues if q not in set(paused)]
        for queue in served:
            if flowing:  # issue 15: grouped jobs first (postgres/flow.py), leased per batch
                fair = (
                    vt,
                    worker_id,
                    partial(_lease_rows, b, tx, now=now, vt=vt, worker_id=worker_id),
                )
                leases += pgflow.take(b, tx, queue, now, limit - len(leases), lease, fair)
            while len(leases) < limit and queue not in done:
                want = limit - len(leases)
                rows, got = _claim_rows(b, tx, queue, want, now, vt, worker_id)
                leases.extend(got)
                if rows < want:  # none left (a buried or expired row leaves room: claim again)
                    break
        next_due = None
        if len(leases) < limit:  # short: every served queue was read to the end (issue 18)
            if moved:  # the look-up's deadlines were promoted or expired: read them again
                due, lease_end = one(tx.conn.execute(b.sql(_NEXT_DUE)))
            next_due = _earliest(due, lease_end)
            if flowing:  # issue 15: or when a throttled group is due
                next_due = pgflow.next_due(b, tx, now, next_due, served)
    return Claimed.of(leases, next_due, limit=limit)


def _flow_look_up(
    b: PostgresBroker,
    tx: Tx,
    queues: Sequence[str],
    now: float,
    limit: int,
    vt: float,
    worker_id: str,
) -> tuple[Any, int, list[Lease]]:
    """The look-up of a process that sees flow groups (issue 15): it takes the flow lock
    (``_LOOKUP_LOCKED``), and the first queue's first flow statement travels with it
    (``pgflow.first_statement``: guarded, under the lock; one round trip fewer per claim):
    its claim of fair-only groups, or, for a queue served the general way, its first batch
    of heads (kept for ``pgflow.take``). The look-up's row, and the rows taken and leases of
    that claim."""
    look_up = (b.sql(_LOOKUP_LOCKED), (pgflow.lock_key(b),))
    pgflow.locked(tx)
    if not queues:
        return tx.rows(*look_up)[0], 0, []
    sql, params, fair = pgflow.first_statement(b, queues[0], now, limit, vt, worker_id)
    look, first = tx.first_two(look_up, (sql, params))
    if not fair:
        pgflow.prefetch(tx, queues[0], limit, first)
        return look[0], 0, []
    took, leases = _lease_rows(b, tx, queues[0], first, now, vt, worker_id)
    _, _, due, lease_end, _, _, pending, *_ = look[0]
    if not (first or pending) and (due or now + 1) > now and (lease_end or now + 1) > now:
        # its guards passed and no new group waits in flow_pending: nothing to take there
        pgflow.fair_tried(tx, queues[0])
    return look[0], took, leases


def _claim_rows(
    b: PostgresBroker, tx: Tx, queue: str, n: int, now: float, vt: float, worker_id: str
) -> tuple[int, list[Lease]]:
    """One claim statement: the rows it took, and their leases in claim order (priority, then
    the old place); an undecodable row or one past its ``expires_at`` gets none."""
    sql, fixed = _sized(b, _CLAIM, n)
    size = () if fixed else (n,)
    cur = tx.first(sql, (queue, queue, *size, now + vt, now, worker_id or None), binary=True)
    rows = cur.fetchall()
    return _lease_rows(b, tx, queue, rows, now, vt, worker_id)


def _lease_rows(
    b: PostgresBroker,
    tx: Tx,
    queue: str,
    rows: list[Any],
    now: float,
    vt: float,
    worker_id: str,
) -> tuple[int, list[Lease]]:
    """The leases of the rows a claim statement took (see ``_claim_rows``)."""
    if not rows:
        return 0, []
    rows.sort(key=lambda r: (r[5], r[15]))  # RETURNING has no order: priority, old seq
    tx.count(queue, "pending", "active", len(rows))
    leases: list[Lease] = []
    events, expires = tx.events, now + vt
    for row in rows:
        job = claimed_job(row)  # a plain envelope: a template copy (no expires_at to lapse)
        if job is None:
            rec = pg_rec(row[:15])
            if rec.corrupt is not None:
                bury_corrupt(b, tx, rec, now, worker_id)
                continue
            if lifecycle.is_lapsed(rec.job, now) and _lapse(b, tx, row, now):
                continue  # issue 15: past its expires_at: expired, never leased
            job = rec.job
        events.append(
            {"type": "started", "job_id": row[1], "queue": queue, "task": row[3], "at": now}
            | {"attempt": job.attempts, "worker": worker_id}
        )
        leases.append(Lease.fast(job, row[16], expires))
    return len(rows), leases


def _lapse(b: PostgresBroker, tx: Tx, row: Sequence[Any], now: float) -> bool:
    """A claimed row past its ``expires_at``: expired as if found pending (its envelope, not
    the overlay: it never started), its workflow dependants end (sqllimits.lapsed)."""
    rec = Rec((*row[:4], "pending", *row[5:11]), True)
    rec.state = "active"  # the row's state now (the claim counted pending -> active)
    return pgflow.lapsed(b, tx, rec, now)


def lease_many(
    b: PostgresBroker, tx: Tx, now: float, vt: float, worker_id: str, recs: list[Rec]
) -> list[Lease]:
    """Lease the pending rows the flow-control path picked and locked (issue 15;
    ``pgflow.take``), in their order: one ``_LEASE`` statement writes the claim overlay (the
    envelope untouched, as after ``_CLAIM``). A row past its ``expires_at`` or undecodable goes
    through ``lease_one`` (it expires or is dead-lettered instead)."""
    plain = [r for r in recs if r.corrupt is None and not lifecycle.is_lapsed(r.job, now)]
    odd = {id(r) for r in recs} - {id(r) for r in plain}
    tokens: dict[int, str] = {}
    if plain:
        rids = num_array([r.rid for r in plain])
        params = (now + vt, now, worker_id or None, rids)
        tokens = dict(tx.conn.execute(b.sql(_LEASE), params, prepare=True).fetchall())
    leases: list[Lease] = []
    for rec in recs:
        if id(rec) in odd:
            if (got := lease_one(b, tx, now, vt, worker_id, rec)) is not None:
                leases.append(got)
            continue
        if (token := tokens.get(rec.rid)) is None:
            continue  # not pending any more (cannot happen: the row is locked)
        lifecycle.claim(rec.job, now, vt, worker_id)  # what pg_rec reads from the overlay
        tx.count(rec.job.queue, rec.state, "active")
        rec.state = "active"
        tx.emit("started", rec.job, now, attempt=rec.job.attempts, worker=worker_id)
        leases.append(Lease(rec.job, token, now + vt))
    return leases


def lease_one(
    b: PostgresBroker, tx: Tx, now: float, vt: float, worker_id: str, rec: Rec
) -> Lease | None:
    """Lease one pending row the flow-control path picked (issue 15; ``pgflow.take``): the
    whole envelope is saved with the lease (``_save``: ``claims = 0``, no overlay), so every
    reader sees the same job as after a fast claim. An undecodable row is dead-lettered
    (``decode_error``); a row past its ``expires_at`` expires instead."""
    if pgflow.lapsed(b, tx, rec, now):
        return None
    lifecycle.claim(rec.job, now, vt, worker_id)
    if rec.corrupt is None:
        token = secrets.token_hex(16)
        try:
            b._save(tx, rec, token, placed=False)
        except (TypeError, ValueError, RecursionError) as exc:  # cannot be re-encoded
            rec.spoil(rec.row, rec.row[10], exc)
            rec.state = "active"
            lifecycle.claim(rec.job, now, vt, worker_id)
        else:
            tx.emit("started", rec.job, now, attempt=rec.job.attempts, worker=worker_id)
            return Lease(rec.job, token, now + vt)
    bury_corrupt(b, tx, rec, now, worker_id)
    return None


def bury_corrupt(b: PostgresBroker, tx: Tx, rec: Rec, now: float, worker_id: str) -> None:
    """An undecodable row: active → dead_letter with kind ``decode_error``; bytes kept."""
    rec.job.state = JobState.ACTIVE
    lifecycle.bury_undecodable(rec.job, now, worker_id)
    b._save(tx, rec)
    tx.emit("dead_lettered", rec.job, now, reason=str(ErrorKind.DECODE_ERROR))
    pgflow.done(b, tx, now, rec.job)  # issue 16: a workflow node's dependants end
