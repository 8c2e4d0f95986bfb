"""Flow control of the SQL brokers (issue 15), plain SQL inside the claim transaction, written
once for SQLite and PostgreSQL (dialect seam: ``sqldb.Db``).

The same model as the memory broker (broker/memflow.py, core/flow.py): a pending job with a
group (``jobs.grp``) waits in that group; ``flow_groups`` holds one row per group that has (or
recently had) waiting jobs, ``due`` = when a claim should look at it again (0: now; NULL: parked
until a concurrency slot frees), ``rr`` = its round-robin place. A claim reads the groups of the
queue that are due, oldest ``(due, rr)`` first, asks their limiters (``flow_buckets``,
``flow_slots``, overrides in ``flow_limits``) and leases the head job of each group that may
run; the group then goes behind the others (``rr`` = a fresh sequence number). ``on_save`` /
``on_insert`` (called by the broker for grouped jobs only) schedule a group when one of its
jobs becomes pending and free a job's slots, waking the groups that waited for them, when it
leaves ``active`` (any way: complete, fail, release, expired lease). A group found empty is
deleted: idle groups cost nothing, and a claim touches only the groups it serves (index
``flow_groups_due``), never all of them.

Every step that reads or writes a limiter or a group runs after ``Db.lock()``: SQLite's write
transaction already excludes the others; PostgreSQL takes one transaction-level advisory lock
(postgres/limits.py), so two claimers can never both take the last token or slot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ..core import lifecycle
from ..core.flow import bucket_take, limiter_base, limiter_label
from ..core.job import Job
from ..core.serialization import job_to_dict
from ..core.state import JobState
from .sqldb import Db
from .sqlflow import SqlFlow
from .sqlite_rows import COLS, Rec

_DUE = (
    "SELECT grp FROM {S}.flow_groups WHERE queue = ? AND due IS NOT NULL AND due <= ?"
    " ORDER BY due, rr LIMIT 1"
)
_HEAD = (
    f"SELECT {COLS} FROM {{S}}.jobs WHERE queue = ? AND grp = ? AND state = 'pending'"
    " ORDER BY priority, seq LIMIT 1 {LOCK}"
)
_ANY = "SELECT 1 FROM {S}.jobs WHERE queue = ? AND grp = ? AND state = 'pending' LIMIT 1"
_RESCHEDULE = "UPDATE {S}.flow_groups SET due = ?, rr = ?, why = ? WHERE queue = ? AND grp = ?"
#: The earliest future time a group becomes due (an empty claim sleeps until then at most).
NEXT_GROUP = "SELECT MIN(due) FROM {S}.flow_groups WHERE due IS NOT NULL AND due > ?"
#: A group whose head row another transaction holds (an operator's action) is looked at again
#: this much later: never waited for, never forgotten.
BUSY_S = 0.05
SCHEDULE = (
    "INSERT INTO {S}.flow_groups (queue, grp, due, rr) VALUES (?, ?, 0, ?) ON CONFLICT DO NOTHING"
)
_WAKE = (
    "UPDATE {S}.flow_groups SET due = 0, why = NULL WHERE due IS NULL AND (queue, grp) IN"
    " (SELECT w.queue, w.grp FROM {S}.flow_waiters w JOIN {S}.flow_slots s ON s.name = w.name"
    " WHERE s.job_id = ?) RETURNING queue"
)
_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
Lease = Callable[[Rec], Any]


def take(db: Db, queue: str, now: float, want: int, lease: Lease) -> list[Any]:
    """Lease up to ``want`` jobs of ``queue``'s due groups (``lease(rec)``: a Lease or None)."""
    out: list[Any] = []
    db.lock()
    while len(out) < want:
        row = db.run(_DUE, (queue, now)).fetchone()
        if row is None:
            break
        grp = row[0]
        head = db.run(_HEAD, (queue, grp)).fetchone()
        if head is None:
            if db.run(_ANY, (queue, grp)).fetchone() is None:  # empty: forgotten until one of
                db.run("DELETE FROM {S}.flow_groups WHERE queue = ? AND grp = ?", (queue, grp))
            else:  # its jobs becomes pending again; or its head is held: look again soon
                db.run(_RESCHEDULE, (now + BUSY_S, db.next_seq(), None, queue, grp))
            continue
        rec = Rec(tuple(head), True)
        verdict, why = admit(db, rec.job.id, rec.job.flow or {}, queue, grp, now)
        if verdict is None:
            db.run(_RESCHEDULE, (now, db.next_seq(), None, queue, grp))
            leased = lease(rec)
            if leased is not None:
                out.append(leased)
        else:  # inf: parked until a slot frees (NULL)
            due = None if verdict == float("inf") else verdict
            db.run(_RESCHEDULE, (due, db.next_seq(), why, queue, grp))
    return out


def next_due(db: Db, now: float, due: float | None) -> float | None:
    """``due`` or the earliest time a throttled group becomes due, whichever comes first."""
    group_due = db.run(NEXT_GROUP, (now,)).fetchone()[0]
    if group_due is None:
        return due
    return float(group_due) if due is None else min(due, float(group_due))


def on_insert(db: Db, jobs: Sequence[Job]) -> None:
    """Newly stored grouped jobs: the groups of the pending ones are scheduled."""
    flows = [(j.queue, j.flow) for j in jobs if j.state is JobState.PENDING and j.flow]
    groups = sorted({(queue, str(f["g"])) for queue, f in flows})
    if groups:
        db.schedule(groups)


def on_save(db: Db, job: Job, old_state: str) -> None:
    """A grouped job was written: pending -> its group is scheduled; it left ``active`` -> the
    slots it owns free (fenced by its id) and the groups that waited for them wake."""
    new_state = str(job.state)
    if old_state == "active" and new_state != "active":
        db.lock()
        for (queue,) in db.run(_WAKE, (job.id,)).fetchall():
            db.wake(queue)
        db.run(
            "DELETE FROM {S}.flow_waiters WHERE name IN"
            " (SELECT name FROM {S}.flow_slots WHERE job_id = ?)",
            (job.id,),
        )
        db.run("DELETE FROM {S}.flow_slots WHERE job_id = ?", (job.id,))
    if new_state == "pending" and job.flow:
        db.lock()
        db.run(SCHEDULE, (job.queue, job.flow["g"], db.next_seq()))


def admit(
    db: Db, job_id: str, flow: dict[str, Any], queue: str, grp: str, now: float
) -> tuple[float | None, str | None]:
    """(None, None): the job may run (tokens and its slots taken); else (when to look again,
    why it waits); ``inf``: when a slot frees (the group is recorded as a waiter)."""
    for name, limit in flow.get("c") or ():
        n = int(spec(db, name, [limit])[0])
        sql = "SELECT COUNT(*) FROM {S}.flow_slots WHERE name = ?"
        running = int(db.run(sql, (name,)).fetchone()[0])
        if running >= n:
            db.run(
                "INSERT INTO {S}.flow_waiters (name, queue, grp) VALUES (?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (name, queue, grp),
            )
            return float("inf"), f"waiting for {limiter_label(name)} ({running} running)"
    taken: list[tuple[str, tuple[float, float]]] = []
    wait, why = 0.0, None
    for name, *own in flow.get("r") or ():
        rate, per, burst = spec(db, name, own)
        sql = "SELECT tokens, at FROM {S}.flow_buckets WHERE name = ?"
        row = db.run(sql, (name,)).fetchone()
        ok, state, next_at = bucket_take(
            None if row is None else (row[0], row[1]), rate, per, burst, now
        )
        if not ok:
            wait, why = (
                max(wait, next_at),
                f"throttled by rate limit {limiter_label(name, [rate, per])}",
            )
        taken.append((name, state))
    if wait:
        return wait, why
    db.many(
        "INSERT INTO {S}.flow_buckets (name, tokens, at) VALUES (?, ?, ?) ON CONFLICT (name)"
        " DO UPDATE SET tokens = excluded.tokens, at = excluded.at",
        [(name, s[0], s[1]) for name, s in taken],
    )
    db.many(
        "INSERT INTO {S}.flow_slots (name, job_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
        [(name, job_id) for name, _ in flow.get("c") or ()],
    )
    return None, None


def spec(db: Db, name: str, own: Sequence[Any]) -> list[float]:
    """The limit of ``name``: a run-time override (``flow_limits``) of it or its limiter."""
    row = db.run(
        "SELECT spec FROM {S}.flow_limits WHERE name IN (?, ?) ORDER BY length(name) DESC LIMIT 1",
        (name, limiter_base(name)),
    ).fetchone()
    values = orjson.loads(row[0]) if row is not None else own
    return [float(v) for v in values]


def lapsed(db: Db, rec: Rec, now: float) -> bool:
    """A ready row past its ``expires_at`` (issue 15) becomes ``expired`` instead of leased
    (a workflow node's dependants then end); True if it did."""
    job = rec.job
    if rec.corrupt is not None or job.expires_at is None or job.expires_at > now:
        return False
    lifecycle.lapse(job, now)
    db.save(rec)
    db.emit("expired", job, now)
    SqlFlow(db, now).done(job)
    return True


def replace_waiting(db: Db, job_id: str, job: Job, now: float) -> bool:
    """``debounce`` (issue 15): newest arguments; a scheduled job's delay restarts."""
    recs = db.rows("id = ?", (job_id,), full=True)
    if not recs or recs[0].corrupt is not None:
        return False
    stored = recs[0].job
    if not lifecycle.debounce(stored, job, now):
        return False
    due = stored.run_at if stored.state in _DELAYED else None
    db.run(
        "UPDATE {S}.jobs SET payload = ?, run_at = ?, due_at = ? WHERE id = ?",
        (orjson.dumps(job_to_dict(stored)), stored.run_at, due, job_id),
    )
    return True


class SqlFlowAdmin:
    """``flow_set_limit`` / ``flow_status`` / ``replace_waiting`` of the SQL brokers (mixed in;
    ``_db`` binds a transaction)."""

    _write: Callable[[], AbstractContextManager[Any]]
    _db: Callable[[Any], Db]

    def replace_waiting(self, job_id: str, job: Job, now: float) -> bool:
        """``debounce`` (issue 15): newest arguments; a scheduled job's delay restarts."""
        with self._write() as tx:
            return replace_waiting(self._db(tx), job_id, job, now)

    def flow_set_limit(self, name: str, spec: list[float] | None) -> None:
        """Override the limit of a limiter (``rate:<task>``) or one bucket / slot; None clears.

        Parked groups are looked at again by the next claim (a raised concurrency limit)."""
        with self._write() as tx:
            db = self._db(tx)
            db.lock()
            if spec is None:
                db.run("DELETE FROM {S}.flow_limits WHERE name = ?", (name,))
            else:
                db.run(
                    "INSERT INTO {S}.flow_limits (name, spec) VALUES (?, ?) ON CONFLICT (name)"
                    " DO UPDATE SET spec = excluded.spec",
                    (name, orjson.dumps([float(v) for v in spec]).decode()),
                )
            # every waiting group is looked at again by the next claim, under the new limit
            for (queue,) in db.run(
                "UPDATE {S}.flow_groups SET due = 0, why = NULL RETURNING queue"
            ).fetchall():
                db.wake(queue)
            db.run("DELETE FROM {S}.flow_waiters")

    def flow_status(self, now: float) -> dict[str, Any]:
        """Run-time limits, bucket tokens, running jobs per slot, waiting jobs per group."""
        with self._write() as tx:
            db = self._db(tx)

            def read(sql: str) -> list[Any]:
                return list(db.run(sql).fetchall())

            slots = read("SELECT name, job_id FROM {S}.flow_slots ORDER BY name, job_id")
            why = {(q, g): w for q, g, w in read("SELECT queue, grp, why FROM {S}.flow_groups")}
            waiting = read(
                "SELECT queue, grp, COUNT(*) FROM {S}.jobs WHERE state = 'pending'"
                " AND grp IS NOT NULL GROUP BY queue, grp ORDER BY queue, grp"
            )
            limits = read("SELECT name, spec FROM {S}.flow_limits")
            buckets = read("SELECT name, tokens FROM {S}.flow_buckets")
        running: dict[str, list[str]] = {}
        for name, job_id in slots:
            running.setdefault(name, []).append(job_id)
        return {
            "limits": {n: orjson.loads(s) for n, s in limits},
            "buckets": {n: round(t, 3) for n, t in buckets},
            "running": running,
            "groups": [
                {"queue": q, "group": g, "waiting": int(n), "why": why.get((q, g))}
                for q, g, n in waiting
            ],
        }
