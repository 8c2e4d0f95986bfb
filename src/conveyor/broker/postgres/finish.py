"""Completion of the PostgreSQL backend in set-based statements (``PostgresBroker.complete``).

A batch of acks costs two statements, whatever its size: ``_LOCK`` looks up each ack's (id,
token) pair among the active rows (one index probe each) and locks the ones whose lease is still
held (in job id order, so two completers never deadlock), and ``_DONE`` writes every completed
row from arrays (``unnest``).
An ack whose token no longer matches (the lease expired and the job was claimed again, or it
already finished) finds no row: False for that ack, True for the others. The envelope is
rebuilt in Python (the claim overlay folded in, ``postgres/rec.py``); events and count deltas
go in bulk at COMMIT (``PgStore._before_commit``).

Slow path: an ack that carries an ``errors`` entry (a dropped result) and a workflow step go
through the per-job path (``PostgresBroker._save``), and the latter then through
``finish_special``, in the same transaction: the hook where releasing a workflow's dependants
(issue 16) belongs. ``SPECIAL`` is the SQL test that sends a row there (a job with a workflow
edge not marked yet). A flow group's job (issue 15) completes set-based; the concurrency slots
of a batch free in the completion's own write (``flow_sql.FREE_DONE``, under the flow lock).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...core import lifecycle
from ..base import Ack
from ..sqlite_rows import Rec
from . import flow as pgflow  # issue 15/16 hooks
from .arrays import bytea_binary, num_array, text_array
from .flow_sql import FREE_DONE, FREE_DONE_WHERE
from .rec import COLS, completed_envelope, pg_rec
from .store import Tx

if TYPE_CHECKING:
    from .broker import PostgresBroker

Row = tuple[Any, ...]

#: SQL (over ``jobs j``) true for a row whose completion must go through ``finish_special``: a
#: workflow step with an edge not marked yet (issue 16: its dependants; the test
#: ``SqlFlow.done_many`` uses, one probe of ``wf_edges``'s primary key: an edge leaving a job is
#: marked only by that job's own completion, so a job without one has nothing to release). A
#: flow-group member (issue 15) completes set-based too; its concurrency slots free in its
#: write (``flow_sql.FREE_DONE``).
SPECIAL = "EXISTS (SELECT 1 FROM {S}.wf_edges e WHERE e.parent = j.id AND e.done = 0)"
#: One index probe per ack (``jobs_id_key``), locked as it is found: a LATERAL subquery the
#: planner cannot flatten (``OFFSET 0``). As a join, the plan followed the statistics: ANALYZE
#: (autovacuum) usually sees few running jobs, the planner then expected ONE active row and, for
#: a large batch, read the whole table and compared every row with every ack (a nested loop
#: with a join filter): 40 to 84 ms for 500 acks over 20,000 rows, ~170 µs of server CPU per job
#: (``bench/pg_statements.py -2048``; ``tests/postgres/test_complete_plan.py``). Rows lock in
#: the order of the acks, which ``complete_acks`` sorts by job id: two completers lock in the
#: same order (no deadlock).
_LOCK = (
    "SELECT {cols}, a.n, ({special}), j.grp FROM"
    " unnest(%s::text[], %s::text[], %s::int[]) AS a(id, token, n) CROSS JOIN LATERAL"
    " (SELECT * FROM {{S}}.jobs j WHERE j.id = a.id AND j.token = a.token"
    " AND j.state = 'active' OFFSET 0 FOR UPDATE) j"
)
#: ``_LOCK`` with its columns and test filled in (built once, not per completion)
_LOCKED = _LOCK.format(cols=", ".join(f"j.{c.strip()}" for c in COLS.split(",")), special=SPECIAL)
_DONE = (
    "UPDATE {S}.jobs j SET state = 'completed', seq = nextval('{S}.job_seq'), due_at = NULL,"
    " lease_at = NULL, token = NULL, claims = 0, finished_at = %s, payload = u.payload"
    " FROM unnest(%s::bigint[], %s::bytea[]) AS u(rid, payload) WHERE j.rid = u.rid"
)


def complete_acks(b: PostgresBroker, acks: Sequence[Ack], now: float) -> list[bool]:
    """``PostgresBroker.complete``: True per ack recorded, False per stale token."""
    out = [False] * len(acks)
    if not acks:
        return out
    order = sorted(range(len(acks)), key=lambda i: acks[i].job_id)  # the lock order (_LOCK)
    with b._write() as tx:
        rows = tx.rows(
            b.sql(_LOCKED),
            (
                text_array([acks[i].job_id for i in order]),
                text_array([acks[i].token for i in order]),
                num_array(order),
            ),
            binary=True,
        )
        fast: list[tuple[Row, Ack, str | None]] = []
        slow: list[tuple[Rec, Ack]] = []
        special: list[Rec] = []
        seen: set[int] = set()
        for row in rows:
            i = row[15]
            if row[0] in seen:  # the same ack twice in one batch: only the first counts
                continue
            seen.add(row[0])
            out[i] = True
            if not row[16] and acks[i].error is None:
                fast.append((row[:15], acks[i], row[17]))
                continue
            rec = pg_rec(row[:15])
            slow.append((rec, acks[i]))
            if row[16]:
                special.append(rec)
        _write_fast(b, tx, fast, now)
        for rec, ack in slow:
            lifecycle.complete(rec.job, now, ack.result, ack.error)
            b._save(tx, rec)
            tx.emit("completed", rec.job, now, attempt=rec.job.attempts)
        if special:
            finish_special(b, tx, special, now)
    return out


def _write_fast(
    b: PostgresBroker, tx: Tx, done: list[tuple[Row, Ack, str | None]], now: float
) -> None:
    """Complete plain and grouped jobs with one ``UPDATE … FROM unnest``; events and counts in
    bulk; the grouped ones' slots free in the same write (``FREE_DONE``). The envelope is patched
    as a dict (``rec.completed_envelope``); an unexpected one (written by someone else,
    undecodable) is decoded and saved through ``lifecycle`` like the slow path (``_save``
    frees its slots)."""
    if not done:
        return
    rids: list[int] = []
    payloads: list[bytes] = []
    slots: list[str] = []  # ids of jobs that may hold concurrency slots
    queues: dict[str, int] = {}
    events = tx.events
    for row, ack, grouped in done:
        patched = completed_envelope(row, now, ack.result)
        if patched is None:  # not the envelope expected: decoded and saved like the slow path
            rec = pg_rec(row)
            lifecycle.complete(rec.job, now, ack.result)
            b._save(tx, rec)
            tx.emit("completed", rec.job, now, attempt=rec.job.attempts)
            continue
        rids.append(row[0])
        payloads.append(patched[0])
        if grouped and pgflow.may_hold_slots(grouped):  # issue 15: its slots free
            slots.append(row[1])
        queue = row[2]
        queues[queue] = queues.get(queue, 0) + 1
        events.append(
            {"type": "completed", "job_id": row[1], "queue": queue, "task": row[3], "at": now}
            | {"attempt": patched[1]}
        )
    for queue, n in queues.items():  # counts, retention and waiters once per queue
        tx.count(queue, "active", "completed", n)
        tx.finished.add((queue, "completed"))
        tx.done.add(queue)
    if not rids:
        return
    done_params = (now, num_array(rids), bytea_binary(payloads))
    # sent with the next statement (the settle one, usually): nobody reads its result
    if slots:  # issue 15: the slots free in the same write, under the flow lock
        pgflow.defer_lock(b, tx)  # (a statement of its own in the same round trip)
        tx.defer(
            b.sql(FREE_DONE + _DONE + FREE_DONE_WHERE),
            (text_array(slots), b.channel, *done_params),
        )
    else:
        tx.defer(b.sql(_DONE), done_params)


def finish_special(b: PostgresBroker, tx: Tx, recs: list[Rec], now: float) -> None:
    """``recs`` (workflow steps, flow-group members; already completed and saved in ``tx``,
    which freed a grouped job's slots: ``pgflow.on_save``) release what waits on them, in the
    completion's own transaction: a workflow step's dependants (``pgflow.done``, issue 16)."""
    for rec in recs:
        pgflow.done(b, tx, now, rec.job)
