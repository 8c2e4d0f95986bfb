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

from ..core.flow import bucket_take, is_queue_limiter, limiter_base, limiter_label
from .sqlite_rows import COLS, Rec
from .sqlite_store import Tx

#: Up to ``?3`` due groups of queue ``?1`` at ``?2``, oldest ``(due, rr)`` first, each with its
#: head job (NULL columns: the group is empty) — one statement per batch of groups, where one
#: query for the group and one for its head cost two per leased job.
_DUE_HEADS = (
    "SELECT g.grp, "
    + ", ".join("j." + col.strip() for col in COLS.split(","))
    + " FROM (SELECT grp, due, rr FROM flow_groups WHERE queue = ?1 AND due IS NOT NULL"
    " AND due <= ?2 ORDER BY due, rr LIMIT ?3) AS g LEFT JOIN jobs AS j ON j.rid ="
    " (SELECT rid FROM jobs WHERE queue = ?1 AND grp = g.grp AND state = 'pending'"
    " ORDER BY priority, seq LIMIT 1) ORDER BY g.due, g.rr"
)
_RESCHEDULE = "UPDATE flow_groups SET due = ?, rr = ?, why = ? WHERE queue = ? AND grp = ?"
#: The earliest future time a group of queue ``?`` becomes due (an empty claim sleeps until
#: then at most; one index probe per queue, where a scan of every queue's groups read them all).
NEXT_GROUP = "SELECT MIN(due) FROM flow_groups WHERE queue = ? AND due IS NOT NULL AND due > ?"
Lease = Callable[[Rec], Any]


def next_group(tx: Tx, queues: Sequence[str], now: float) -> float | None:
    """The earliest future time a group of ``queues`` becomes due (None: none is throttled)."""
    times = [tx.conn.execute(NEXT_GROUP, (q, now)).fetchone()[0] for q in queues]
    return min((t for t in times if t is not None), default=None)


def take(tx: Tx, queue: str, now: float, want: int, lease: Lease) -> list[Any]:
    """Lease up to ``want`` jobs of ``queue``'s due groups (``lease(rec)``: a Lease or None).

    Groups come in batches (``_DUE_HEADS``); a served group goes behind the others with a
    fresh ``rr``, which is also the order the next batch reads them in: the same round-robin
    as one group per query. Every group of a batch makes progress (a job leased, lapsed or
    buried; the group put aside or deleted), so the loop ends."""
    out: list[Any] = []
    c = tx.conn
    overrides = c.execute("SELECT 1 FROM flow_limits LIMIT 1").fetchone() is not None
    stop = False
    while len(out) < want:
        batch = c.execute(_DUE_HEADS, (queue, now, want - len(out))).fetchall()
        if not batch:
            break
        moves: list[tuple[Any, ...]] = []
        for grp, *head in batch:
            if head[0] is None:  # empty: forgotten until one of its jobs becomes pending again
                c.execute("DELETE FROM flow_groups WHERE queue = ? AND grp = ?", (queue, grp))
                continue
            rec = Rec(tuple(head), True)
            if rec.corrupt is None and (rec.job.expires_at or float("inf")) <= now:
                lease(rec)  # lapses it (expired, never runs) before it takes a token or slot
                moves.append((now, tx.next_seq(), None, queue, grp))
                continue
            verdict, why, whole = admit(
                tx, rec.job.id, rec.job.flow or {}, queue, grp, now, overrides
            )
            if verdict is None:
                moves.append((now, tx.next_seq(), None, queue, grp))
                leased = lease(rec)
                if leased is not None:
                    out.append(leased)
            else:  # inf: parked until a slot frees (due NULL)
                due = None if verdict == float("inf") else verdict
                moves.append((due, tx.next_seq(), why, queue, grp))
                if whole:
                    stop = True  # the queue's own limit said no: no other group may start now
                    break
        c.executemany(_RESCHEDULE, moves)
        if stop:
            break
    return out


_SCHEDULE = "INSERT OR IGNORE INTO flow_groups (queue, grp, due, rr) VALUES (?, ?, 0, ?)"
_FREE = "DELETE FROM flow_slots WHERE name = ? AND job_id = ?"
_WAITERS = "SELECT queue, grp FROM flow_waiters WHERE name = ?"
_WAKE = "UPDATE flow_groups SET due = 0, why = NULL WHERE queue = ? AND grp = ? AND due IS NULL"


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
        free(tx, job.id, job.flow.get("c") or ())
    if new_state == "pending":
        tx.conn.execute(_SCHEDULE, (job.queue, job.flow["g"], tx.next_seq()))


def forget_queue(tx: Tx, queue: str) -> None:
    """``clear_queue``: the queue's groups and slot waits go with its waiting jobs (buckets and
    the slots of running jobs stay: they belong to limiters and leases)."""
    tx.conn.execute("DELETE FROM flow_groups WHERE queue = ?", (queue,))
    tx.conn.execute("DELETE FROM flow_waiters WHERE queue = ?", (queue,))


def free(tx: Tx, job_id: str, slots: Sequence[Any]) -> None:
    """The job left ``active``: each slot it owns frees (fenced: a slot row of another job is
    not touched) and the groups that waited for it are due again. Jobs without slots (fair
    groups, rate limits only) cost nothing here."""
    c = tx.conn
    for name, _ in slots:
        if c.execute(_FREE, (name, job_id)).rowcount:
            # a plain read first: most frees have no waiter (a DELETE ... RETURNING that finds
            # nothing still costs ~4x a SELECT)
            waiting = c.execute(_WAITERS, (name,)).fetchall()
            if waiting:
                c.executemany(_WAKE, waiting)
                c.execute("DELETE FROM flow_waiters WHERE name = ?", (name,))


def admit(
    tx: Tx,
    job_id: str,
    flow: dict[str, Any],
    queue: str,
    grp: str,
    now: float,
    overrides: bool = True,
) -> tuple[float | None, str | None, bool]:
    """(None, None, False): the job may run (tokens and its slots taken); else (when to look
    again, why it waits, whether a limit of the whole queue said no: ``is_queue_limiter``);
    ``inf``: when a slot frees (the group is recorded as a waiter). ``overrides=False``: the
    caller knows ``flow_limits`` is empty (no lookups)."""
    c = tx.conn
    for name, limit in flow.get("c") or ():
        n = int(spec(tx, name, [limit])[0] if overrides else limit)
        running = c.execute("SELECT COUNT(*) FROM flow_slots WHERE name = ?", (name,)).fetchone()[0]
        if running >= n:
            c.execute(
                "INSERT OR IGNORE INTO flow_waiters (name, queue, grp) VALUES (?, ?, ?)",
                (name, queue, grp),
            )
            parked = f"waiting for {limiter_label(name)} ({running} running)"
            return float("inf"), parked, is_queue_limiter(name)
    taken: list[tuple[str, tuple[float, float]]] = []
    wait: float = 0.0
    why: str | None = None
    whole = False
    for name, *own in flow.get("r") or ():
        rate, per, burst = spec(tx, name, own) if overrides else (float(v) for v in own)
        row = c.execute("SELECT tokens, at FROM flow_buckets WHERE name = ?", (name,)).fetchone()
        ok, state, next_at = bucket_take(
            None if row is None else (row[0], row[1]), rate, per, burst, now
        )
        if not ok:
            wait, why = (
                max(wait, next_at),
                f"throttled by rate limit {limiter_label(name, [rate, per])}",
            )
            whole = whole or is_queue_limiter(name)
        taken.append((name, state))
    if wait:
        return wait, why, whole
    if taken:  # (an empty executemany still costs a statement preparation)
        c.executemany(
            "INSERT OR REPLACE INTO flow_buckets (name, tokens, at) VALUES (?, ?, ?)",
            [(name, s[0], s[1]) for name, s in taken],
        )
    if flow.get("c"):
        c.executemany(
            "INSERT OR IGNORE INTO flow_slots (name, job_id) VALUES (?, ?)",
            [(name, job_id) for name, _ in flow["c"]],
        )
    return None, None, False


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
