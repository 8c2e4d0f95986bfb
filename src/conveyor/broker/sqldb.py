"""The dialect seam of the SQL brokers' shared flow code: one statement text, two databases.

Workflows (``sqlflow.py``) and flow control (``sqllimits.py``) are the same SQL on SQLite and
PostgreSQL. Their statements are written once, with ``?`` placeholders, ``{S}.`` before each
table (PostgreSQL's schema; nothing on SQLite) and ``{LOCK}`` where PostgreSQL must lock the row
it reads (``FOR UPDATE SKIP LOCKED``; SQLite's ``BEGIN IMMEDIATE`` already excludes every other
writer). Both databases accept ``INSERT … ON CONFLICT … DO NOTHING / DO UPDATE`` and
``RETURNING``, so nothing else differs. A ``Db`` binds them to one open transaction of one broker
and adds what the backends do differently (sequence numbers, row locking, wake-ups).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from ..core.job import Job
from .sqlite_rows import Rec


@lru_cache(maxsize=512)
def sqlite_sql(text: str) -> str:
    """A shared statement for SQLite (no schema, no row locks)."""
    return text.replace("{S}.", "").replace("{LOCK}", "")


@lru_cache(maxsize=512)
def pg_sql(text: str, schema: str) -> str:
    """A shared statement for PostgreSQL: ``schema`` (quoted) bound, ``%s`` placeholders."""
    return (
        text.replace("?", "%s").replace("{S}", schema).replace("{LOCK}", "FOR UPDATE SKIP LOCKED")
    )


class Db(abc.ABC):
    """The shared flow code's view of one open transaction ``tx`` of ``broker``."""

    #: Whether a row read for update must be locked (PostgreSQL); SQLite's write transaction
    #: already excludes every other writer.
    locks_rows = False

    def __init__(self, broker: Any, tx: Any) -> None:
        self.broker, self.tx = broker, tx

    @abc.abstractmethod
    def q(self, text: str) -> str:
        """``text`` in this database's dialect."""

    def run(self, text: str, params: Sequence[Any] = ()) -> Any:
        """Execute one shared statement; its cursor (``fetchone``, ``fetchall``, ``rowcount``)."""
        return self.tx.conn.execute(self.q(text), params)

    @abc.abstractmethod
    def many(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute one shared statement once per row of parameters."""

    @abc.abstractmethod
    def next_seq(self) -> int:
        """A fresh, increasing placement number (round-robin order of groups)."""

    def next_seqs(self, n: int) -> list[int]:
        """``n`` fresh, increasing placement numbers (a backend may fetch them at once)."""
        return [self.next_seq() for _ in range(n)]

    def move_groups(self, text: str, moves: Sequence[Sequence[Any]]) -> None:
        """``sqllimits``' group moves: ``text`` (an UPDATE of ``flow_groups``) once per move
        of (due, rr, why, queue, grp); a backend may write them all in one statement."""
        self.many(text, moves)

    def add_slots(self, text: str, slots: Sequence[tuple[str, str]]) -> None:
        """``sqllimits``' new slot rows: ``text`` (an INSERT into ``flow_slots``) once per
        (name, job id); a backend may write them all in one statement."""
        self.many(text, slots)

    def place_groups(
        self,
        text: str,
        queue: str,
        moves: Sequence[tuple[float | None, str | None, str]],
        gone: Sequence[str],
    ) -> None:
        """The end of one batch of ``sqllimits.take``: each group of ``moves`` (due, why,
        group) goes behind the others, in order (fresh round-robin numbers; ``text``, the
        UPDATE, once per move), and the groups ``gone`` of ``queue`` are deleted. A backend
        may do it all in one statement."""
        seqs = self.next_seqs(len(moves))
        self.forget_groups(queue, gone)
        rows = [(due, seq, why, queue, g) for seq, (due, why, g) in zip(seqs, moves, strict=True)]
        self.move_groups(text, rows)

    def heads(self, queue: str, now: float, n: int) -> tuple[list[Any], bool, dict[str, int]]:
        """PostgreSQL only (``locks_rows``): the due groups of ``queue`` with their locked
        heads, whether ``flow_limits`` has rows and the running jobs of the groups' slots (see
        ``PgDb.heads``)."""
        raise NotImplementedError

    def head(self, row: Sequence[Any]) -> Rec:
        """A group's head row (``sqldb`` columns) as ``sqllimits.take`` reads it: decoded."""
        return Rec(tuple(row), True)

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
        """The writes that end one batch of ``sqllimits.take``: the slots taken and groups
        parked (``slots``: a ``sqllimits.Slots``), the groups moved or deleted
        (``place_groups``, ``text``), then the heads ``picked`` leased (``lease``); their
        leases. A backend may do it all in one statement."""
        slots.flush()
        self.place_groups(text, queue, moves, gone)
        return lease(picked) if picked else []

    def forget_groups(self, queue: str, groups: Sequence[str]) -> None:
        """Delete the groups of ``queue`` a batch of ``sqllimits.take`` found empty."""
        if groups:
            marks = ", ".join("?" * len(groups))
            sql = f"DELETE FROM {{S}}.flow_groups WHERE queue = ? AND grp IN ({marks})"
            self.run(sql, (queue, *groups))

    @abc.abstractmethod
    def rows(self, where: str, params: Sequence[Any], *, full: bool = True) -> list[Rec]:
        """Job rows matching ``where`` (shared dialect), locked for update where that matters."""

    @abc.abstractmethod
    def insert(self, jobs: Sequence[Job], now: float, payloads: Sequence[bytes]) -> None:
        """Store new jobs in this transaction (the broker's enqueue step)."""

    @abc.abstractmethod
    def schedule(self, groups: Sequence[tuple[str, str]]) -> None:
        """Newly enqueued pending jobs of these (queue, group) pairs: make the groups due."""

    def save(self, rec: Rec) -> None:
        """Write a changed job row back (the broker's ``_save``: counts, hooks, wake-ups)."""
        self.broker._save(self.tx, rec)

    def emit(self, kind: str, job: Job, now: float, **extra: Any) -> None:
        """Record one job event at commit."""
        self.tx.emit(kind, job, now, **extra)

    def lock(self) -> None:
        """Serialise flow-control bookkeeping with every other transaction doing it (a no-op
        where the transaction already excludes every other writer)."""
        return None

    def wake(self, queue: str) -> None:
        """A group of ``queue`` became due: wake its idle workers at commit (if they sleep)."""
        return None
