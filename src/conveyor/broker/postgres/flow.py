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

import orjson

from ...core.flow import flow_problem
from ...core.job import Job
from .. import sqllimits
from ..base import Lease
from ..sqldb import Db, pg_sql
from ..sqlflow import SqlFlow
from ..sqlite_rows import Rec
from ..sqllimits import BUSY_S
from .arrays import num_array, text_array
from .flow_sql import (
    _ADD_SLOTS,
    _BATCH,
    _DRAIN,
    _FAIR,
    _FAIR_GUARDED,
    _FLOWING,
    _HEADS,
    _HEADS_GUARDED,
    _PLACE,
    FREE_DONE,
)
from .store import Tx, one

if TYPE_CHECKING:
    from .broker import PostgresBroker

#: Transactions holding the flow lock (it is held to their end; taken once each).
_LOCKED: weakref.WeakKeyDictionary[Tx, bool] = weakref.WeakKeyDictionary()
#: Per transaction: the queue whose fair statement the look-up's round trip ran (``fair_tried``).
_TRIED: weakref.WeakKeyDictionary[Tx, str] = weakref.WeakKeyDictionary()
#: Per transaction: (queue, n, rows) of the heads read with the claim's look-up (``prefetch``).
_PREFETCHED: weakref.WeakKeyDictionary[Tx, tuple[str, int, list[Any]]] = weakref.WeakKeyDictionary()


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
        got = _PREFETCHED.pop(self.tx, None)  # read with the claim's look-up (``prefetch``)
        if got is not None and got[:2] == (queue, n):
            rows = got[2]
        else:
            rows = self.tx.rows(self.q(_HEADS), (queue, queue, now, n), binary=True)
        running = {
            name: int(k) for row in rows for name, k in zip(row[4] or (), row[5] or (), strict=True)
        }
        return (
            [(grp, rid, more, *cols) for grp, rid, more, _, _, _, *cols in rows],
            any(row[3] for row in rows[:1]),
            running,
        )

    def head(self, row: Sequence[Any]) -> Rec:
        """A claim's head row (``take``, ``sqllimits.take``): ``Head`` (its flow record read,
        no full decode) when its envelope allows it, else decoded."""
        if self.claim is not None and (head := Head.of(row)) is not None:
            return head
        return super().head(row)

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
        held = {i for _, i in slots.new}
        slots.new, slots.waits = [], []
        rows = self.tx.rows(self.q(_BATCH), params, binary=True)
        leases = lease_rows(queue, rows)[1]
        if held.difference(x.id for x in leases):  # admitted, then found undecodable: buried
            lost = text_array(sorted(held.difference(x.id for x in leases)))
            self.tx.conn.execute(
                self.q(FREE_DONE + "SELECT k FROM nt"), (lost, self.broker.channel)
            )
        return leases

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


class Head(Rec):
    """A group's head row for ``sqllimits.take`` in a claim, without the full decode a ``Rec``
    makes: its id, flow record and ``expires_at``, read from the parsed envelope (the rest of
    the job is built when it is leased: ``claim._lease_rows``). An envelope that does not parse
    to an object, or whose flow record or ``expires_at`` is not of the stored shape, is left to
    ``Rec`` (None). One that parses but would not decode in full is leased, found undecodable
    and dead-lettered by ``_lease_rows``; ``PgDb.end_batch`` then frees the slots it took."""

    __slots__ = ()

    @classmethod
    def of(cls, row: Sequence[Any]) -> Head | None:
        """The ``Head`` of ``row``, or None (see the class docstring)."""
        try:
            data = orjson.loads(row[10])
        except (orjson.JSONDecodeError, TypeError):
            return None
        flow = data.get("flow") if type(data) is dict else None
        expires = data.get("expires_at", 0.0) if type(flow) is dict else None
        if expires is None or flow_problem(flow) is not None:
            return None
        if type(expires) not in (int, float) or data.get("state") != "pending":
            return None
        head = cls.__new__(cls)
        head.rid, head.state, head.row = row[0], row[4], tuple(row)
        head.corrupt, head.data = None, None
        values = {"id": row[1], "task": row[3], "queue": row[2], "flow": flow}
        values |= {"args": [], "kwargs": {}, "errors": [], "history": [], "metadata": {}}
        head.job = Job.fast(values | {"expires_at": float(expires) or None})
        return head


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


def defer_lock(b: PostgresBroker, tx: Tx) -> None:
    """Take the flow lock in ``tx`` with its next round trip (a deferred statement: the
    completion's, sent with its write and the settle statement), unless ``tx`` holds it; every
    statement after it plans as ``LOCK_SQL`` says."""
    if tx not in _LOCKED:
        tx.defer(b.sql(f"SELECT {LOCK_SQL}"), (lock_key(b),))
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


def first_statement(
    b: PostgresBroker, queue: str, now: float, want: int, vt: float, worker_id: str
) -> tuple[str, tuple[Any, ...], bool]:
    """The statement sent with the claim's look-up for its first queue, guarded (``_GUARDS``),
    and whether it is the fair one: ``_FAIR_GUARDED`` claims fair-only groups
    (``claim._lease_rows`` leases its rows); for a queue served the general way (``_SLOW``)
    ``_HEADS_GUARDED`` reads the first batch of heads (``prefetch``)."""
    if _SLOW.get(b, {}).get(queue):
        return b.sql(_HEADS_GUARDED), (queue, queue, now, now, now, want), False
    params = (queue, queue, now, now, now, want, now + BUSY_S, now, now + vt, now)
    return b.sql(_FAIR_GUARDED), (*params, worker_id or None), True


def fair_tried(tx: Tx, queue: str) -> None:
    """``_FAIR_GUARDED`` ran for ``queue`` in ``tx`` with its guards passed and took nothing:
    ``take`` does not send ``_FAIR`` again (a round trip for the same answer)."""
    _TRIED[tx] = queue


def prefetch(tx: Tx, queue: str, n: int, rows: list[Any]) -> None:
    """Rows of ``_HEADS_GUARDED`` (``first_statement``) for the first ``PgDb.heads`` of
    ``queue`` with ``n`` in ``tx`` (none: a guard refused, that read is made then)."""
    if rows:
        _PREFETCHED[tx] = (queue, n, rows)


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
        while want > 0 and _TRIED.pop(tx, None) != queue:
            params = (queue, queue, now, want, now + BUSY_S, now, now + vt, now, worker_id or None)
            rows = tx.rows(b.sql(_FAIR), params, binary=True)
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
