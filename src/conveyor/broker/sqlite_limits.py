"""Flow control of the SQLite backend (issue 15), in plain SQL inside the claim transaction.

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..core.flow import bucket_take, limiter_base, limiter_label
from .sqlite_rows import COLS, Rec
from .sqlite_store import Tx

_DUE = (
    "SELECT grp FROM flow_groups WHERE queue = ? AND due IS NOT NULL AND due <= ?"
    " ORDER BY due, rr LIMIT 1"
)
_HEAD = (
    f"SELECT {COLS} FROM jobs WHERE queue = ? AND grp = ? AND state = 'pending'"
    " ORDER BY priority, seq LIMIT 1"
)
_RESCHEDULE = "UPDATE flow_groups SET due = ?, rr = ?, why = ? WHERE queue = ? AND grp = ?"
#: The earliest future time a group becomes due (an empty claim sleeps until then at most).
NEXT_GROUP = "SELECT MIN(due) FROM flow_groups WHERE due IS NOT NULL AND due > ?"
Lease = Callable[[Rec], Any]


def take(tx: Tx, queue: str, now: float, want: int, lease: Lease) -> list[Any]:
    """Lease up to ``want`` jobs of ``queue``'s due groups (``lease(rec)``: a Lease or None)."""
    out: list[Any] = []
    c = tx.conn
    while len(out) < want:
        row = c.execute(_DUE, (queue, now)).fetchone()
        if row is None:
            break
        grp = row[0]
        head = c.execute(_HEAD, (queue, grp)).fetchone()
        if head is None:  # empty: forgotten until one of its jobs becomes pending again
            c.execute("DELETE FROM flow_groups WHERE queue = ? AND grp = ?", (queue, grp))
            continue
        rec = Rec(head, True)
        verdict, why = admit(tx, rec.job.id, rec.job.flow or {}, queue, grp, now)
        if verdict is None:
            c.execute(_RESCHEDULE, (now, tx.next_seq(), None, queue, grp))
            leased = lease(rec)
            if leased is not None:
                out.append(leased)
        elif verdict == float("inf"):
            c.execute(_RESCHEDULE, (None, tx.next_seq(), why, queue, grp))
        else:
            c.execute(_RESCHEDULE, (verdict, tx.next_seq(), why, queue, grp))
    return out


_SCHEDULE = "INSERT OR IGNORE INTO flow_groups (queue, grp, due, rr) VALUES (?, ?, 0, ?)"
_WAKE = (
    "UPDATE flow_groups SET due = 0, why = NULL WHERE due IS NULL AND (queue, grp) IN"
    " (SELECT w.queue, w.grp FROM flow_waiters w JOIN flow_slots s ON s.name = w.name"
    " WHERE s.job_id = ?)"
)


def on_insert(tx: Tx, jobs: Sequence[Any]) -> None:
    """Newly stored grouped jobs: the groups of the pending ones are scheduled."""
    tx.conn.executemany(
        _SCHEDULE,
        [(j.queue, j.flow["g"], tx.next_seq()) for j in jobs if str(j.state) == "pending"],
    )


def on_save(tx: Tx, job: Any, old_state: str) -> None:
    """A grouped job was written: pending -> its group is scheduled; it left ``active`` -> the
    slots it owns free (fenced by its id) and the groups that waited for them wake."""
    new_state = str(job.state)
    if old_state == "active" and new_state != "active":
        c = tx.conn
        c.execute(_WAKE, (job.id,))
        c.execute(
            "DELETE FROM flow_waiters WHERE name IN (SELECT name FROM flow_slots WHERE job_id = ?)",
            (job.id,),
        )
        c.execute("DELETE FROM flow_slots WHERE job_id = ?", (job.id,))
    if new_state == "pending":
        tx.conn.execute(_SCHEDULE, (job.queue, job.flow["g"], tx.next_seq()))


def forget_queue(tx: Tx, queue: str) -> None:
    """``clear_queue``: the queue's groups and slot waits go with its waiting jobs (buckets and
    the slots of running jobs stay: they belong to limiters and leases)."""
    tx.conn.execute("DELETE FROM flow_groups WHERE queue = ?", (queue,))
    tx.conn.execute("DELETE FROM flow_waiters WHERE queue = ?", (queue,))


def admit(
    tx: Tx, job_id: str, flow: dict[str, Any], queue: str, grp: str, now: float
) -> tuple[float | None, str | None]:
    """(None, None): the job may run (tokens and its slots taken); else (when to look again,
    why it waits); ``inf``: when a slot frees (the group is recorded as a waiter)."""
    c = tx.conn
    for name, limit in flow.get("c") or ():
        n = int(spec(tx, name, [limit])[0])
        running = c.execute("SELECT COUNT(*) FROM flow_slots WHERE name = ?", (name,)).fetchone()[0]
        if running >= n:
            c.execute(
                "INSERT OR IGNORE INTO flow_waiters (name, queue, grp) VALUES (?, ?, ?)",
                (name, queue, grp),
            )
            return float("inf"), f"waiting for {limiter_label(name)} ({running} running)"
    taken: list[tuple[str, tuple[float, float]]] = []
    wait, why = 0.0, None
    for name, *own in flow.get("r") or ():
        rate, per, burst = spec(tx, name, own)
        row = c.execute("SELECT tokens, at FROM flow_buckets WHERE name = ?", (name,)).fetchone()
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
    c.executemany(
        "INSERT OR REPLACE INTO flow_buckets (name, tokens, at) VALUES (?, ?, ?)",
        [(name, s[0], s[1]) for name, s in taken],
    )
    c.executemany(
        "INSERT OR IGNORE INTO flow_slots (name, job_id) VALUES (?, ?)",
        [(name, job_id) for name, _ in flow.get("c") or ()],
    )
    return None, None


def spec(tx: Tx, name: str, own: Sequence[Any]) -> list[float]:
    """The limit of ``name``: a run-time override (``flow_limits``) of it or its limiter."""
    row = tx.conn.execute(
        "SELECT spec FROM flow_limits WHERE name IN (?, ?) ORDER BY length(name) DESC LIMIT 1",
        (name, limiter_base(name)),
    ).fetchone()
    values = orjson.loads(row[0]) if row is not None else own
    return [float(v) for v in values]


class SqliteFlowAdmin:
    """``flow_set_limit`` / ``flow_status`` of the SQLite backend (mixed into SqliteBroker)."""

    _write: Callable[[], Any]
    _read: Callable[..., list[Any]]

    def flow_set_limit(self, name: str, spec: list[float] | None) -> None:
        """Override the limit of a limiter (``rate:<task>``) or one bucket / slot; None clears.

        Parked groups are looked at again by the next claim (a raised concurrency limit)."""
        with self._write() as tx:
            if spec is None:
                tx.conn.execute("DELETE FROM flow_limits WHERE name = ?", (name,))
            else:
                tx.conn.execute(
                    "INSERT OR REPLACE INTO flow_limits (name, spec) VALUES (?, ?)",
                    (name, orjson.dumps([float(v) for v in spec]).decode()),
                )
            # every waiting group is looked at again by the next claim, under the new limit
            tx.conn.execute("UPDATE flow_groups SET due = 0, why = NULL")
            tx.conn.execute("DELETE FROM flow_waiters")

    def flow_status(self, now: float) -> dict[str, Any]:
        """Run-time limits, bucket tokens, running jobs per slot, waiting jobs per group."""
        running: dict[str, list[str]] = {}
        for name, job_id in self._read("SELECT name, job_id FROM flow_slots ORDER BY name, job_id"):
            running.setdefault(name, []).append(job_id)
        why = {(q, g): w for q, g, w in self._read("SELECT queue, grp, why FROM flow_groups")}
        waiting = self._read(
            "SELECT queue, grp, COUNT(*) FROM jobs WHERE state = 'pending' AND grp IS NOT NULL"
            " GROUP BY queue, grp ORDER BY queue, grp"
        )
        return {
            "limits": {
                n: orjson.loads(s) for n, s in self._read("SELECT name, spec FROM flow_limits")
            },
            "buckets": {
                n: round(t, 3) for n, t in self._read("SELECT name, tokens FROM flow_buckets")
            },
            "running": running,
            "groups": [
                {"queue": q, "group": g, "waiting": n, "why": why.get((q, g))}
                for q, g, n in waiting
            ],
        }
