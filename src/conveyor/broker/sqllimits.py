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
deleted (on PostgreSQL already by the claim that leases its last job): idle groups cost
nothing, and a claim touches only the groups it serves (index ``flow_groups_due``), never all
of them. Groups set aside for one rate-limit bucket in a claim wait a token apart
(``core.flow.stagger``): a task-wide limit over many fair groups makes one due per token.

Every step that reads or writes a limiter or a group runs after ``Db.lock()``: SQLite's write
transaction already excludes the others; PostgreSQL takes one transaction-level advisory lock
(postgres/flow.py), so two claimers can never both take the last token or slot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..core import lifecycle
from ..core.flow import bucket_take, is_queue_limiter, limiter_base, limiter_label, stagger
from ..core.job import Job
from ..core.state import JobState
from .sqldb import Db
from .sqlflow import SqlFlow
from .sqlite_rows import COLS, Rec
from .sqllimits_admin import SqlFlowAdmin as SqlFlowAdmin  # re-exported (split out)
from .sqllimits_admin import replace_waiting as replace_waiting

#: Up to ``?`` due groups of queue ``?`` at ``?``, oldest ``(due, rr)`` first, each with its head
#: job (NULL columns: the group is empty): one statement per batch of groups, where one query
#: for the group and one for its head cost two per leased job. (SQLite: its write transaction
#: already excludes every other writer, so the head rows need no lock.)
_DUE_HEADS = (
    "SELECT g.grp, "
    + ", ".join("j." + col.strip() for col in COLS.split(","))
    + " FROM (SELECT grp, due, rr FROM {S}.flow_groups WHERE queue = ? AND due IS NOT NULL"
    " AND due <= ? ORDER BY due, rr LIMIT ?) AS g LEFT JOIN {S}.jobs AS j ON j.rid ="
    " (SELECT rid FROM {S}.jobs WHERE queue = ? AND grp = g.grp AND state = 'pending'"
    " ORDER BY priority, seq LIMIT 1) ORDER BY g.due, g.rr"
)
#: PostgreSQL: the same batch in ONE statement (``PgDb.heads``, postgres/flow.py) that also
#: locks the heads (``SKIP LOCKED``: a head another transaction holds is looked at again
#: ``BUSY_S`` later) and tells whether each group has a second pending job: a group whose
#: last job is leased is deleted at once instead of being visited again to be found empty.
_ANY_OVERRIDE = "SELECT 1 FROM {S}.flow_limits LIMIT 1"
_RESCHEDULE = "UPDATE {S}.flow_groups SET due = ?, rr = ?, why = ? WHERE queue = ? AND grp = ?"
#: The earliest future time a group of queue ``?`` becomes due (an empty claim sleeps until
#: then at most; one index probe per queue, where a scan of every queue's groups read them all).
NEXT_GROUP = "SELECT MIN(due) FROM {S}.flow_groups WHERE queue = ? AND due IS NOT NULL AND due > ?"
#: A group whose head row another transaction holds (an operator's action) is looked at again
#: this much later: never waited for, never forgotten.
BUSY_S = 0.05
SCHEDULE = (
    "INSERT INTO {S}.flow_groups (queue, grp, due, rr) VALUES (?, ?, 0, ?) ON CONFLICT DO NOTHING"
)
_FREE = "DELETE FROM {S}.flow_slots WHERE name = ? AND job_id = ?"
#: A group parked on a full slot (``Slots.wait``): woken when the slot frees (``free``).
PARK = "INSERT INTO {S}.flow_waiters (name, queue, grp) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
_WAITERS = "SELECT queue, grp FROM {S}.flow_waiters WHERE name = ?"
WAKE = "UPDATE {S}.flow_groups SET due = 0, why = NULL WHERE queue = ? AND grp = ? AND due IS NULL"
_BUSY = "busy"  # a head row another transaction holds (PostgreSQL only)
Lease = Callable[[list[Rec]], list[Any]]


def each(lease_one: Callable[[Rec], Any]) -> Lease:
    """A batch ``lease`` for ``take`` from a per-row one (a Lease or None per row)."""

    def lease(recs: list[Rec]) -> list[Any]:
        return [got for rec in recs if (got := lease_one(rec)) is not None]

    return lease


Heads = list[tuple[str, Rec | str | None, bool]]


def _heads(db: Db, queue: str, now: float, n: int) -> tuple[Heads, bool, dict[str, int]]:
    """Due groups of ``queue`` with their head rows: a ``Rec``, None (the group is empty) or
    ``_BUSY`` (its head is locked by another transaction), and whether the group has another
    pending job after its head (SQLite: assumed; a group served its last job is found empty on
    its next turn). Also whether ``flow_limits`` has rows (PostgreSQL reads it with the heads;
    SQLite answers True: its caller asked already) and the running jobs of the groups'
    concurrency slots as far as the statement read them (PostgreSQL: every ``conc:`` part of
    each group's name; SQLite: none, ``Slots`` reads them). Up to ``n`` groups (PostgreSQL:
    ``PgDb.heads``, one statement)."""
    if not db.locks_rows:
        # (a statement costs little on SQLite: one batch of n groups, as many as it takes)
        batch = db.run(_DUE_HEADS, (queue, now, n, queue)).fetchall()
        return (
            [
                (grp, None if head[0] is None else Rec(tuple(head), True), True)
                for grp, *head in batch
            ],
            True,
            {},
        )
    rows, overrides, running = db.heads(queue, now, n)
    return (
        [
            (grp, None if rid is None else _BUSY if row[0] is None else db.head(row), more)
            for grp, rid, more, *row in rows
        ],
        overrides,
        running,
    )


def take(db: Db, queue: str, now: float, want: int, lease: Lease) -> list[Any]:
    """Lease up to ``want`` jobs of ``queue``'s due groups (``lease(recs)``: their Leases, a
    row that lapsed or was buried left out).

    Groups come in batches (``_heads``); a served group goes behind the others with a fresh
    ``rr``, which is also the order the next batch reads them in: the same round-robin as one
    group per query. Every group of a batch makes progress (a job leased, lapsed or buried; the
    group put aside, deleted or, its head held elsewhere, looked at ``BUSY_S`` later), so the
    loop ends. A limit of the whole queue that says no stops the claim of the queue there. The
    admitted heads of a batch are leased together (one statement on PostgreSQL), after their
    tokens and slots are taken; the batch's writes (new slots, waiters, group moves and
    deletes, leases) end it together (``Db.end_batch``: one statement on PostgreSQL)."""
    out: list[Any] = []
    db.lock()
    # whether run-time overrides exist (PostgreSQL: read by the first heads statement)
    overrides = None if db.locks_rows else db.run(_ANY_OVERRIDE).fetchone() is not None
    stop = False
    behind: dict[str, int] = {}  # the claim's groups set aside per bucket (``stagger``)
    while len(out) < want and not stop:
        batch, found, running = _heads(db, queue, now, want - len(out))
        if not batch:
            break
        overrides = found if overrides is None else overrides
        heads = [rec for _, rec, _ in batch if isinstance(rec, Rec) and rec.corrupt is None]
        slots = Slots(db, heads, behind, running)
        moves: list[tuple[float | None, str | None, str]] = []  # (due, why, group), in order
        gone: list[str] = []  # empty, or its last job leased: deleted
        picked: list[Rec] = []
        for grp, rec, more in batch:
            if rec is None:  # empty: forgotten until one of its jobs becomes pending again
                gone.append(grp)
            elif isinstance(rec, str):  # its head is held by another transaction: look again soon
                moves.append((now + BUSY_S, None, grp))
            else:
                verdict, why, stop = _serve(db, rec, queue, grp, now, overrides, slots)
                if verdict is None:
                    picked.append(rec)  # leased, or lapsed (expired, never runs)
                    if not more:  # its last job: nothing left to visit
                        gone.append(grp)
                        continue
                    verdict = now
                parked = verdict == float("inf")  # until a slot frees: due NULL
                moves.append((None if parked else verdict, why, grp))
                if stop:  # the queue's own limit said no: no other group may start now
                    break
        out += db.end_batch(_RESCHEDULE, queue, slots, moves, gone, picked, lease)
    return out


def _serve(
    db: Db, rec: Rec, queue: str, grp: str, now: float, overrides: bool, slots: Slots
) -> tuple[float | None, str | None, bool]:
    """Ask the limiters of ``rec``, the head of group ``grp`` of ``queue``: (None, None, False)
    to lease it (or, past its ``expires_at``, to let it lapse before any token or slot), else
    (when to look at the group again, ``inf``: when a slot frees; why it waits; whether a
    limit of the whole queue said no)."""
    if rec.corrupt is None and (rec.job.expires_at or float("inf")) <= now:
        return None, None, False
    flow = rec.job.flow
    if not flow or not (flow.get("c") or flow.get("r")):  # a fair group: no limiter to ask
        return None, None, False
    return admit(db, rec.job.id, flow, queue, grp, now, overrides, slots)


def next_due(db: Db, now: float, due: float | None, queues: Sequence[str]) -> float | None:
    """``due`` or the earliest time a throttled group of ``queues`` becomes due, whichever
    comes first (one index probe per served queue)."""
    times = [db.run(NEXT_GROUP, (q, now)).fetchone()[0] for q in queues]
    times = [float(t) for t in times if t is not None] + ([] if due is None else [due])
    return min(times, default=None)


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
        free(db, job.id, (job.flow or {}).get("c") or ())
    if new_state == "pending" and job.flow:
        db.lock()
        db.run(SCHEDULE, (job.queue, job.flow["g"], db.next_seq()))


def forget_queue(db: Db, queue: str) -> None:
    """``clear_queue``, after its deletes: the queue's groups without a pending job left and
    their slot waits go (buckets and the slots of running jobs stay: they belong to limiters
    and leases; a group whose job another transaction held on PostgreSQL stays, as it waits)."""
    db.lock()
    db.run(
        "DELETE FROM {S}.flow_groups AS g WHERE queue = ? AND NOT EXISTS (SELECT 1 FROM {S}.jobs j"
        " WHERE j.queue = g.queue AND j.grp = g.grp AND j.state = 'pending')",
        (queue,),
    )
    db.run(
        "DELETE FROM {S}.flow_waiters AS w WHERE queue = ? AND NOT EXISTS (SELECT 1 FROM"
        " {S}.flow_groups g WHERE g.queue = w.queue AND g.grp = w.grp)",
        (queue,),
    )


def free(db: Db, job_id: str, slots: Sequence[Any]) -> None:
    """The job left ``active``: each slot it owns frees (fenced: a slot row of another job is
    not touched) and the groups that waited for it are due again. Jobs without slots (fair
    groups, rate limits only) cost nothing here (not even the flow lock)."""
    if not slots:
        return
    db.lock()
    for name, _ in slots:
        if db.run(_FREE, (name, job_id)).rowcount:
            # a plain read first: most frees have no waiter (a DELETE ... RETURNING that finds
            # nothing still costs ~4x a SELECT on SQLite)
            waiting = [tuple(w) for w in db.run(_WAITERS, (name,)).fetchall()]
            if waiting:
                db.many(WAKE, waiting)
                db.run("DELETE FROM {S}.flow_waiters WHERE name = ?", (name,))
                for queue in sorted({q for q, _ in waiting}):
                    db.wake(queue)


def free_held(db: Db, job_id: str) -> None:
    """A row that no longer decodes (its flow record unknown) left ``active``: the slot rows
    naming its id free (``flow_slots_job`` index) and their waiters wake, as ``free``."""
    db.lock()
    names = db.run("SELECT name FROM {S}.flow_slots WHERE job_id = ?", (job_id,)).fetchall()
    free(db, job_id, [(name, None) for (name,) in names])


class Slots:
    """Running jobs per concurrency slot for one batch of heads (``take``): read for the whole
    batch in one statement, counted here as heads are admitted, the new slot rows inserted
    together (``flush``) before the next batch reads them. Runs under the flow lock."""

    def __init__(
        self,
        db: Db,
        recs: Sequence[Rec] = (),
        behind: dict[str, int] | None = None,
        known: dict[str, int] | None = None,
    ) -> None:
        self.db, self.new = db, list[tuple[str, str]]()
        #: (slot, queue, group): groups parked on a full slot (written at ``flush``)
        self.waits: list[tuple[str, str, str]] = []
        #: per rate-limit bucket, the groups this claim set aside for it so far (``stagger``)
        self.behind: dict[str, int] = {} if behind is None else behind
        names = sorted({str(c[0]) for r in recs for c in (r.job.flow or {}).get("c") or ()})
        # ``known``: counts the heads' statement already read (PostgreSQL)
        names = [n for n in names if n not in (known or {})]
        self.running = dict.fromkeys(names, 0) | (known or {})
        if names:
            marks = ", ".join("?" * len(names))
            sql = (
                f"SELECT name, COUNT(*) FROM {{S}}.flow_slots WHERE name IN ({marks}) GROUP BY name"
            )
            self.running.update((n, int(c)) for n, c in db.run(sql, names).fetchall())

    def count(self, name: str) -> int:
        """Jobs holding slot ``name`` now (admitted in this batch included)."""
        if name not in self.running:
            sql = "SELECT COUNT(*) FROM {S}.flow_slots WHERE name = ?"
            self.running[name] = int(self.db.run(sql, (name,)).fetchone()[0])
        return self.running[name]

    def take(self, job_id: str, names: Sequence[str]) -> None:
        """``job_id`` holds ``names`` (written at ``flush``)."""
        for name in names:
            self.running[name] = self.count(name) + 1
            self.new.append((name, job_id))

    def wait(self, name: str, queue: str, grp: str) -> None:
        """Group ``grp`` of ``queue`` waits for slot ``name`` to free (written at ``flush``)."""
        self.waits.append((name, queue, grp))

    def flush(self) -> None:
        """Insert the slot rows taken and the waiters recorded since the last flush."""
        if self.new:
            self.db.add_slots(
                "INSERT INTO {S}.flow_slots (name, job_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                self.new,
            )
            self.new = []
        if self.waits:
            self.db.many(PARK, self.waits)
            self.waits = []


def admit(
    db: Db,
    job_id: str,
    flow: dict[str, Any],
    queue: str,
    grp: str,
    now: float,
    overrides: bool = True,
    slots: Slots | None = None,
) -> tuple[float | None, str | None, bool]:
    """(None, None, False): the job may run (tokens and its slots taken); else (when to look
    again, why it waits, whether a limit of the whole queue said no: ``is_queue_limiter``);
    ``inf``: when a slot frees (the group is recorded as a waiter). ``overrides=False``: the
    caller knows ``flow_limits`` is empty (no lookups). ``slots``: the batch's slot counts (its
    new rows are written at its ``flush``); None: read and written here."""
    held = Slots(db) if slots is None else slots
    for name, limit in flow.get("c") or ():
        n = int(spec(db, name, [limit])[0] if overrides else limit)
        running = held.count(name)
        if running >= n:
            held.wait(name, queue, grp)
            if slots is None:
                held.flush()
            parked = f"waiting for {limiter_label(name)} ({running} running)"
            return float("inf"), parked, is_queue_limiter(name)
    taken: list[tuple[str, tuple[float, float]]] = []
    wait: float = 0.0
    why: str | None = None
    whole = False
    refused: list[str] = []
    for name, *own in flow.get("r") or ():
        rate, per, burst = spec(db, name, own) if overrides else (float(v) for v in own)
        sql = "SELECT tokens, at FROM {S}.flow_buckets WHERE name = ?"
        row = db.run(sql, (name,)).fetchone()
        ok, state, next_at = bucket_take(
            None if row is None else (row[0], row[1]), rate, per, burst, now
        )
        if not ok:
            # the groups this claim set aside for the same bucket already go first, a token
            # each: one group is due per token, not all of them at the next (``stagger``)
            wait = max(wait, stagger(next_at, held.behind, name, rate, per))
            why = f"throttled by rate limit {limiter_label(name, [rate, per])}"
            whole = whole or is_queue_limiter(name)
            refused.append(name)
        taken.append((name, state))
    if wait:
        for name in refused:
            held.behind[name] = held.behind.get(name, 0) + 1
        return wait, why, whole
    if taken:  # (an empty executemany still costs a statement preparation)
        db.many(
            "INSERT INTO {S}.flow_buckets (name, tokens, at) VALUES (?, ?, ?) ON CONFLICT (name)"
            " DO UPDATE SET tokens = excluded.tokens, at = excluded.at",
            [(name, s[0], s[1]) for name, s in taken],
        )
    held.take(job_id, [name for name, _ in flow.get("c") or ()])
    if slots is None:
        held.flush()
    return None, None, False


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
