"""Workflows (issue 16) and flow control (issue 15) on PostgreSQL: the shared SQL of
broker/sqlflow.py and broker/sqllimits.py bound to one PostgreSQL transaction (``PgDb``), and
the few hooks ``PostgresBroker`` calls.

Concurrency (SQLite serialises every writer; PostgreSQL does not):

* Flow control: every transaction that reads or writes a group, a bucket, a slot or a waiter
  first takes ONE transaction-level advisory lock per schema (``PgDb.lock``), so two claimers
  can never both take the last token or slot, and a slot freed by a completion can never miss
  the group that is parking itself on it at the same moment. Claims that find no group at all
  (``flowing``: two index probes) never take it: the unlimited path does not pay.
* Enqueue never takes that lock (a producer's open transaction would stall every claimer): it
  appends (queue, group) to ``flow_pending`` in its own transaction, and the next flow-aware
  claim moves the committed ones into ``flow_groups`` under the lock. A group a claimer deletes
  as empty while a job of it is being enqueued is therefore recreated from ``flow_pending``
  once that job is visible: never stranded.
* Workflows: each edge is marked with ``UPDATE … WHERE done = 0`` and each node's counter with
  ``UPDATE … RETURNING`` (row locks: concurrent parents decrement in turn, exactly one sees 0).
* A group's head row held by another transaction (an operator's action) is skipped
  (``SKIP LOCKED``) and the group looked at again shortly, never waited for.

Fair-only groups (``fair_by`` alone: no limiter to ask) are claimed in ONE statement
(``_FAIR``: due groups, heads locked and leased, groups moved or deleted) whose rows lease like
a plain claim's; groups with a limiter, run-time overrides, and whatever a claim still wants
after it go the general way (``sqllimits.take``). The statements find job rows by ``ctid`` or
primary key whatever the statistics say (a cached generic plan made while ANALYZE saw almost
no pending job walked every pending job through the state index at each claim).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...core.job import Job
from .. import sqllimits
from ..base import Lease
from ..sqldb import Db, pg_sql
from ..sqlflow import SqlFlow
from ..sqlite_rows import COLS, Rec
from ..sqllimits import BUSY_S
from .arrays import num_array, text_array
from .rec import COLS as PG_COLS
from .store import Tx, one

if TYPE_CHECKING:
    from .broker import PostgresBroker

#: The pause, tested in each statement that picks groups (its own snapshot), as
#: ``claim._CLAIM`` does: a pause committed after the claim's look-up stops this claim too.
_NOT_PAUSED = "NOT EXISTS (SELECT 1 FROM {S}.queues q WHERE q.name = f.queue AND q.paused)"

#: Transactions holding the flow lock (it is held to their end; taken once each).
_LOCKED: weakref.WeakKeyDictionary[Tx, bool] = weakref.WeakKeyDictionary()
_FLOWING = "SELECT EXISTS (SELECT 1 FROM {S}.flow_groups), EXISTS (SELECT 1 FROM {S}.flow_pending)"
#: The newly enqueued groups (``flow_pending``) into ``flow_groups``, due now, in one statement
#: (sqllimits.SCHEDULE for all of them: a new group takes the next round-robin place).
_DRAIN = (
    "WITH gone AS (DELETE FROM {S}.flow_pending RETURNING queue, grp)"
    " INSERT INTO {S}.flow_groups (queue, grp, due, rr) SELECT queue, grp, 0,"
    " nextval('{S}.job_seq') FROM (SELECT DISTINCT queue, grp FROM gone ORDER BY queue, grp) AS d"
    " ON CONFLICT DO NOTHING"
)
#: The completion's write (``finish._DONE``) of jobs that held concurrency slots, in one
#: statement with what ``sqllimits.free`` does for them, under the flow lock: every slot row a
#: completed job owns (``%s``: their ids; fenced: only rows the job owns) deleted, the waiters
#: of the slots that freed deleted, their groups due again, and the groups' queues NOTIFYed
#: (``%s``: the broker's channel; delivered at COMMIT as the settle statement's are). The
#: ``nt`` test is a one-time filter: it runs once, before the jobs are written.
FREE_DONE = (
    "WITH fr AS (DELETE FROM {S}.flow_slots WHERE job_id = ANY(%s::text[]) RETURNING name),"
    " w AS (DELETE FROM {S}.flow_waiters WHERE name IN (SELECT name FROM fr)"
    " RETURNING queue, grp),"
    " up AS (UPDATE {S}.flow_groups g SET due = 0, why = NULL FROM (SELECT DISTINCT queue, grp"
    " FROM w) d WHERE g.queue = d.queue AND g.grp = d.grp AND g.due IS NULL),"
    " nt AS (SELECT count(pg_notify(%s, CASE WHEN octet_length(q) < 7000 THEN q ELSE '' END))"
    " AS k FROM (SELECT DISTINCT queue AS q FROM w) x) "
)
#: ``FREE_DONE``'s end: after ``finish._DONE``'s own WHERE.
FREE_DONE_WHERE = " AND (SELECT k FROM nt) >= 0"
#: The end of a batch of ``sqllimits.take`` (``PgDb.place_groups``) in one statement: the
#: groups ``m`` go behind the others with fresh round-robin numbers (``v``: ``nextval`` per row
#: as the array is read, increasing in batch order) and the groups ``gone`` are deleted. Each
#: group is found by its own primary-key probe (a scalar subquery: its ``ctid``) and written
#: through that ``ctid``: a join of the arrays with ``flow_groups`` was planned as a hash join
#: over every group of the queue while the table had no statistics yet (a fresh table). No
#: ``generate_series`` of a parameter: its estimate (1,000 rows) kept the server re-planning
#: the statement at each call instead of using its generic plan.
_PLACE_WITH = (
    "WITH m AS (SELECT u.*, nextval('{S}.job_seq') AS v FROM unnest(%s::float8[], %s::text[],"
    " %s::text[]) WITH ORDINALITY AS u(due, why, grp, i)),"
    " gone AS (DELETE FROM {S}.flow_groups WHERE ctid = ANY(ARRAY(SELECT (SELECT ctid FROM"
    " {S}.flow_groups f WHERE f.queue = %s AND f.grp = e.grp) FROM unnest(%s::text[]) AS e(grp))))"
)
_PLACE_MOVE = (
    "UPDATE {S}.flow_groups g SET due = m.due, rr = m.v, why = m.why FROM m"
    " WHERE g.ctid = (SELECT ctid FROM {S}.flow_groups f WHERE f.queue = %s AND f.grp = m.grp)"
)
_PLACE = _PLACE_WITH + " " + _PLACE_MOVE
#: Up to ``%s`` due groups of a queue, oldest ``(due, rr)`` first, with their first two pending
#: job ids (``ids``: the head, and whether another job follows it), each head locked by its own
#: primary-key probe (``LATERAL``, ``SKIP LOCKED``: a head another transaction holds comes back
#: NULL next to its id), whether ``flow_limits`` has rows, and the running jobs of each group's
#: concurrency slots (``cs``: the ``conc:`` parts of its name, which are its jobs' slot names,
#: core/flow.py; their ``flow_slots`` rows counted): everything ``sqllimits.take``
#: reads about a batch, in one statement (a CTE of the heads joined back by hash cost twice
#: the server time). An empty group in the batch is deleted and leaves the batch a head short:
#: rare, as a group is deleted when its last job is leased; the next batch fills in. The head's
#: state test is written ``IS TRUE``: no plan can enter an index on ``state`` with it.
_HEADS = (
    "SELECT g.grp, g.ids[1], g.ids[2] IS NOT NULL, EXISTS (SELECT 1 FROM {S}.flow_limits), g.cs,"
    " ARRAY(SELECT (SELECT count(*) FROM {S}.flow_slots s WHERE s.name = x.c) FROM unnest(g.cs)"
    " WITH ORDINALITY AS x(c, i) ORDER BY x.i), h.*"
    " FROM (SELECT f.grp, f.due, f.rr, ARRAY(SELECT rid FROM {S}.jobs WHERE queue = %s"
    " AND grp = f.grp AND state = 'pending' ORDER BY priority, seq LIMIT 2) AS ids,"
    " ARRAY(SELECT p FROM unnest(string_to_array(f.grp, '|')) AS p WHERE p LIKE 'conc:%%') AS cs"
    " FROM {S}.flow_groups f WHERE f.queue = %s AND f.due IS NOT NULL AND f.due <= %s"
    " AND " + _NOT_PAUSED + " ORDER BY f.due, f.rr LIMIT %s) AS g LEFT JOIN LATERAL"
    f" (SELECT {COLS} FROM {{S}}.jobs WHERE rid = g.ids[1] AND (state = 'pending') IS TRUE"
    " FOR UPDATE SKIP LOCKED) AS h ON true ORDER BY g.due, g.rr"
)
#: A group with no limiter: its name is one ``fair:`` part (core/flow.py joins a job's
#: limiters and fair key with ``|``, which a key value never contains).
_FAIR_ONLY = "(f.grp LIKE 'fair:%%' AND strpos(f.grp, '|') = 0)"
#: Fair-only groups (no limiter to ask) claimed in ONE statement (``take``): up to ``%s`` due
#: groups of the queue in ``(due, rr)`` order, cut before the first group with a limiter and
#: empty while ``flow_limits`` has rows (run-time overrides: the general path asks them); each
#: group's head locked (``SKIP LOCKED``: a held head leaves its group due ``BUSY_S`` later),
#: leased like ``claim._CLAIM`` does (the overlay, the same RETURNING columns, the group's
#: batch place where ``_CLAIM`` returns the old ``seq``), its group moved behind the others
#: (``rr`` = ``v``, a fresh number taken in batch order) or deleted when that was its last
#: pending job or it had none. Where ``_HEADS`` + ``claim._LEASE`` + ``_PLACE`` were three
#: statements and a full decode of each head in the worker.
_FAIR = (
    "WITH g AS (SELECT f.ctid AS t, " + _FAIR_ONLY + " AS fair, ARRAY(SELECT ctid FROM {S}.jobs"
    " WHERE queue = %s AND grp = f.grp AND state = 'pending' ORDER BY priority, seq LIMIT 2)"
    " AS ids, nextval('{S}.job_seq') AS v FROM {S}.flow_groups f WHERE f.queue = %s"
    " AND f.due IS NOT NULL AND f.due <= %s AND NOT EXISTS (SELECT 1 FROM {S}.flow_limits)"
    " AND " + _NOT_PAUSED + " ORDER BY f.due, f.rr LIMIT %s),"
    " h AS (SELECT g.t, g.ids, g.v, k.rid, k.ctid AS jt FROM g LEFT JOIN LATERAL (SELECT rid,"
    " ctid FROM {S}.jobs WHERE ctid = g.ids[1] AND state = 'pending' FOR UPDATE SKIP LOCKED)"
    " AS k ON true"
    " WHERE g.v < COALESCE((SELECT min(v) FROM g WHERE NOT fair), 9223372036854775807)),"
    " mv AS (UPDATE {S}.flow_groups f SET due = CASE WHEN h.rid IS NULL THEN %s ELSE %s END,"
    " rr = h.v, why = NULL FROM h WHERE f.ctid = h.t AND h.ids[1] IS NOT NULL"
    " AND (h.rid IS NULL OR h.ids[2] IS NOT NULL)),"
    " gone AS (DELETE FROM {S}.flow_groups f USING h WHERE f.ctid = h.t"
    " AND (h.ids[1] IS NULL OR (h.rid IS NOT NULL AND h.ids[2] IS NULL)))"
    " UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s,"
    " token = replace(gen_random_uuid()::text, '-', ''), claims = j.claims + 1,"
    " started_at = %s, worker = %s FROM h WHERE j.ctid = h.jt"
    " RETURNING " + ", ".join(f"j.{c.strip()}" for c in PG_COLS.split(",")) + ", h.v, j.token"
)
#: The end of a batch of ``sqllimits.take`` in ONE statement (``PgDb.end_batch``): the new slot
#: rows (``sl``) and waiters (``wt``), the groups' moves and deletes (``_PLACE``'s ``m``, ``gone``,
#: ``mv``) and the admitted heads leased like ``claim._CLAIM`` does (the overlay; the RETURNING
#: columns of ``_FAIR``, the head's place in the batch where ``_FAIR`` returns the group's),
#: where they were four statements (slots, place, lease; a waiter insert per parked group).
#: Every CTE writes another table, so none needs to see another's rows.
_BATCH = (
    _PLACE_WITH + ", mv AS (" + _PLACE_MOVE + "),"
    " sl AS (INSERT INTO {S}.flow_slots (name, job_id) SELECT * FROM unnest(%s::text[],"
    " %s::text[]) ON CONFLICT DO NOTHING),"
    " wt AS (INSERT INTO {S}.flow_waiters (name, queue, grp) SELECT * FROM unnest(%s::text[],"
    " %s::text[], %s::text[]) ON CONFLICT DO NOTHING)"
    " UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s,"
    " token = replace(gen_random_uuid()::text, '-', ''), claims = j.claims + 1,"
    " started_at = %s, worker = %s FROM unnest(%s::bigint[]) WITH ORDINALITY AS p(rid, i)"
    " WHERE j.rid = p.rid AND (j.state = 'pending') IS TRUE"
    " RETURNING " + ", ".join(f"j.{c.strip()}" for c in PG_COLS.split(",")) + ", p.i, j.token"
)
#: ``sqllimits.Slots.flush`` for a whole batch (``PgDb.add_slots``).
_ADD_SLOTS = (
    "INSERT INTO {S}.flow_slots (name, job_id) SELECT * FROM unnest(%s::text[], %s::text[])"
    " ON CONFLICT DO NOTHING"
)


class PgDb(Db):
    """``sqldb.Db`` over one transaction of ``PostgresBroker``."""

    broker: PostgresBroker
    tx: Tx
    locks_rows = True

    def q(self, text: str) -> str:
        """``text`` for PostgreSQL (``%s``, the broker's schema, ``FOR UPDATE SKIP LOCKED``)."""
        return pg_sql(text, self.broker.s)

    def many(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        """``executemany`` on a cursor of the transaction's connection."""
        if rows:
            with self.tx.conn.cursor() as cur:
                cur.executemany(self.q(text), rows)

    def next_seq(self) -> int:
        """The schema's placement sequence."""
        return int(one(self.tx.conn.execute(self.q("SELECT nextval('{S}.job_seq')")))[0])

    def place_groups(
        self,
        text: str,
        queue: str,
        moves: Sequence[tuple[float | None, str | None, str]],
        gone: Sequence[str],
    ) -> None:
        """A batch's group moves and deletes in one statement (``_PLACE``)."""
        if moves or gone:
            due, why, grp = zip(*moves, strict=True) if moves else ((), (), ())
            params = (num_array(due), text_array(why), text_array(grp))
            self.tx.conn.execute(
                self.q(_PLACE), (*params, queue, text_array(gone), queue), prepare=True
            )

    def heads(self, queue: str, now: float, n: int) -> tuple[list[Any], bool, dict[str, int]]:
        """Up to ``n`` due groups of ``queue`` as (group, head id: NULL if empty, another
        pending job?, *head columns: NULL if held elsewhere), whether ``flow_limits`` has rows,
        and the running jobs per slot the groups name (``_HEADS``, one statement)."""
        params = (queue, queue, now, n)
        rows = self.tx.conn.execute(self.q(_HEADS), params, prepare=True).fetchall()
        running = {name: int(k) for row in rows for name, k in zip(row[4], row[5], strict=True)}
        return (
            [(grp, rid, more, *cols) for grp, rid, more, _, _, _, *cols in rows],
            any(row[3] for row in rows[:1]),
            running,
        )

    #: (visibility timeout, worker id, ``claim._lease_rows``): set by ``take`` for a claim,
    #: whose batches then end in one statement (``end_batch``)
    claim: tuple[float, str, LeaseRows] | None = None
    #: the claim's time (with ``claim``)
    now = 0.0

    def end_batch(
        self,
        text: str,
        queue: str,
        slots: Any,
        moves: Sequence[tuple[float | None, str | None, str]],
        gone: Sequence[str],
        picked: list[Rec],
        lease: Callable[[list[Rec]], list[Any]],
    ) -> list[Any]:
        """A batch's slots, waiters, group moves and deletes and leases in one statement
        (``_BATCH``) when this is a claim's; its leases as ``claim._lease_rows`` makes them
        (an undecodable head is dead-lettered, one past its ``expires_at`` expires: neither
        took a slot)."""
        if self.claim is None or not (picked or moves or gone or slots.new or slots.waits):
            return super().end_batch(text, queue, slots, moves, gone, picked, lease)
        vt, worker_id, lease_rows = self.claim
        now = self.now
        due, why, grp = zip(*moves, strict=True) if moves else ((), (), ())
        waits = slots.waits
        params = (
            *(num_array(due), text_array(why), text_array(grp), queue, text_array(gone), queue),
            *(text_array(n for n, _ in slots.new), text_array(i for _, i in slots.new)),
            *(text_array(w[0] for w in waits), text_array(w[1] for w in waits)),
            *(text_array(w[2] for w in waits), now + vt, now, worker_id or None),
            num_array(r.rid for r in picked),
        )
        slots.new, slots.waits = [], []
        rows = self.tx.conn.execute(self.q(_BATCH), params, prepare=True, binary=True).fetchall()
        return lease_rows(queue, rows)[1]

    def add_slots(self, text: str, slots: Sequence[tuple[str, str]]) -> None:
        """A batch's new slot rows in one ``INSERT … SELECT FROM unnest`` (``_ADD_SLOTS``)."""
        if slots:
            names, ids = text_array(n for n, _ in slots), text_array(i for _, i in slots)
            self.tx.conn.execute(self.q(_ADD_SLOTS), (names, ids), prepare=True)

    def rows(self, where: str, params: Sequence[Any], *, full: bool = True) -> list[Rec]:
        """Job rows, locked until the transaction ends (``FOR UPDATE``)."""
        return self.broker._rows(self.tx, self.q(where), params, "FOR UPDATE")

    def insert(self, jobs: Sequence[Job], now: float, payloads: Sequence[bytes]) -> None:
        """The broker's enqueue step in this transaction."""
        from .enqueue import insert_jobs

        insert_jobs(self.broker, self.tx, jobs, now, payloads)

    def schedule(self, groups: Sequence[tuple[str, str]]) -> None:
        """Queue the groups for the next flow-aware claim (no lock: see the module docstring)."""
        self.many("INSERT INTO {S}.flow_pending (queue, grp) VALUES (?, ?)", groups)

    def lock(self) -> None:
        """The schema's flow lock, once per transaction, held to its end."""
        if self.tx not in _LOCKED:
            self.tx.conn.execute(f"SELECT {LOCK_SQL}", (lock_key(self.broker),))
            _LOCKED[self.tx] = True

    def wake(self, queue: str) -> None:
        """NOTIFY the queue's idle workers at commit."""
        self.tx.notify.add(queue)


#: The flow lock as a SELECT item: its one parameter is ``lock_key``. It also plans the rest of
#: its transaction (every flow statement runs after it) without sorts or sequential scans where
#: an index answers: all estimates are one row when ``jobs`` has no statistics yet or ANALYZE
#: saw a drained table, and cached generic plans then read every pending job of the queue per
#: group (``jobs_queue_created`` + a sort, not ``jobs_group`` in its order) and every group per
#: claim (``_PLACE``). ``jit`` off: the price of a disabled path would put such statements over
#: ``jit_above_cost`` (tens of ms of compilation per call).
LOCK_SQL = (
    "pg_advisory_xact_lock(hashtext(%s)), set_config('enable_sort', 'off', true),"
    " set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"
)


def lock_key(b: PostgresBroker) -> str:
    """The name the schema's flow lock is hashed from."""
    return f"conveyor.flow:{b.schema}"


def locked(tx: Tx) -> None:
    """``tx`` took the flow lock in a statement of its own making (the claim's look-up sends
    ``LOCK_SQL`` with it: one round trip fewer); ``PgDb.lock`` does not take it again."""
    _LOCKED[tx] = True


def flowing(b: PostgresBroker, tx: Tx, seen: tuple[bool, bool] | None = None) -> bool:
    """Any flow group, scheduled or newly enqueued (``seen``: whether ``flow_groups`` and
    ``flow_pending`` have rows, as the claim's look-up found them; None: two index probes). If
    so, take the flow lock and move the newly enqueued groups into ``flow_groups`` (a
    ``flow_pending`` row committed after the look-up waits for the next claim)."""
    db = PgDb(b, tx)
    groups, pending = seen if seen is not None else one(tx.conn.execute(db.q(_FLOWING)))
    if not (groups or pending):
        return False
    db.lock()
    if not pending:
        return True
    tx.conn.execute(db.q(_DRAIN), prepare=True)
    return True


#: Claims of a queue that go the general way once the general way leased jobs there after
#: ``_FAIR`` found nothing (groups with a limiter first in line, or run-time overrides): the
#: fast statement is tried again only after this many, so such a queue does not pay for it at
#: every claim.
SLOW_CLAIMS = 64
#: Per broker, per queue: general claims left before ``take`` tries ``_FAIR`` again.
_SLOW: weakref.WeakKeyDictionary[PostgresBroker, dict[str, int]] = weakref.WeakKeyDictionary()
#: ``claim._lease_rows``'s shape: (rows taken, their leases) of rows ``_FAIR`` returned.
LeaseRows = Callable[[str, list[Any]], tuple[int, list[Lease]]]


def take(
    b: PostgresBroker,
    tx: Tx,
    queue: str,
    now: float,
    want: int,
    lease: Callable[[list[Rec]], list[Lease]],
    claim: tuple[float, str, LeaseRows] | None = None,
) -> list[Lease]:
    """Lease up to ``want`` jobs of ``queue``'s due groups: fair-only groups in one statement
    per round of groups (``_FAIR``, when ``claim`` = (visibility timeout, worker id,
    ``claim._lease_rows``) is given; its rows lease like a plain claim's), then, if that
    found no more, sqllimits.take, a batch at a time through ``lease``
    (``claim.lease_many``)."""
    out: list[Lease] = []
    slow = _SLOW.setdefault(b, {})
    if claim is not None and not slow.get(queue):
        vt, worker_id, lease_rows = claim
        while want > 0:
            params = (queue, queue, now, want, now + BUSY_S, now, now + vt, now, worker_id or None)
            rows = tx.conn.execute(b.sql(_FAIR), params, prepare=True, binary=True).fetchall()
            took, got = lease_rows(queue, rows)
            out += got
            want -= took
            if not took:
                break
        if want <= 0:
            return out
    elif claim is not None:
        slow[queue] -= 1
    db = PgDb(b, tx)
    if claim is not None:
        db.claim, db.now = claim, now
    rest = sqllimits.take(db, queue, now, want, lease)
    if rest and claim is not None:  # groups with limiters are served in this queue
        slow[queue] = SLOW_CLAIMS
    return out + rest


def may_hold_slots(grp: str) -> bool:
    """Whether a job of group ``grp`` may hold concurrency slots: every slot name of a job's
    flow spec (``conc:…``: core/flow.py) is also a part of its group, so a group without one
    (a fair group, rate limits only) spares its completion a parse of the envelope."""
    return "conc:" in grp


def next_due(
    b: PostgresBroker, tx: Tx, now: float, due: float | None, queues: Sequence[str]
) -> float | None:
    """``due`` or the earliest time a throttled group of ``queues`` becomes due."""
    return sqllimits.next_due(PgDb(b, tx), now, due, queues)


def forget_queue(b: PostgresBroker, tx: Tx, queue: str) -> None:
    """``clear_queue`` removed the queue's waiting jobs: their groups go (sqllimits)."""
    sqllimits.forget_queue(PgDb(b, tx), queue)


def on_save(b: PostgresBroker, tx: Tx, job: Job, old_state: str) -> None:
    """A grouped job was written (sqllimits.on_save)."""
    sqllimits.on_save(PgDb(b, tx), job, old_state)


def on_insert(b: PostgresBroker, tx: Tx, jobs: Sequence[Job]) -> None:
    """Grouped jobs were inserted (in the broker's or the caller's transaction)."""
    sqllimits.on_insert(PgDb(b, tx), jobs)


def lapsed(b: PostgresBroker, tx: Tx, rec: Rec, now: float) -> bool:
    """A claimed row past its ``expires_at`` became ``expired`` (sqllimits.lapsed)."""
    return sqllimits.lapsed(PgDb(b, tx), rec, now)


def done(b: PostgresBroker, tx: Tx, now: float, job: Job) -> None:
    """``job`` reached a terminal state: release or end its workflow dependants. Only workflow
    nodes (``metadata["workflow"]``) and undecodable rows look for edges."""
    meta = job.metadata if isinstance(job.metadata, dict) else {}
    if "workflow" in meta or "decode_error" in meta:
        SqlFlow(PgDb(b, tx), now).done(job)
