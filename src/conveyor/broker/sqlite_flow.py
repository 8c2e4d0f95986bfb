"""The SQLite side of the shared workflow and flow-control SQL (sqlflow.py, sqllimits.py):
``SqliteDb``, the dialect binding of one ``BEGIN IMMEDIATE`` transaction (no schema, no row
locks: the write lock already excludes every other writer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.job import Job
from .sqldb import Db, sqlite_sql
from .sqlite_rows import Rec
from .sqllimits import SCHEDULE

if TYPE_CHECKING:
    from .sqlite import SqliteBroker
    from .sqlite_store import Tx


class SqliteDb(Db):
    """``sqldb.Db`` over one ``BEGIN IMMEDIATE`` transaction of ``SqliteBroker``."""

    broker: SqliteBroker
    tx: Tx

    def q(self, text: str) -> str:
        """``text`` for SQLite."""
        return sqlite_sql(text)

    def many(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        """``executemany``."""
        self.tx.conn.executemany(sqlite_sql(text), rows)

    def next_seq(self) -> int:
        """The file's placement counter."""
        return self.tx.next_seq()

    def rows(self, where: str, params: Sequence[Any], *, full: bool = True) -> list[Rec]:
        """Job rows (the write lock is held already)."""
        return self.broker._rows(self.tx, sqlite_sql(where), params, full=full)

    def insert(self, jobs: Sequence[Job], now: float, payloads: Sequence[bytes]) -> None:
        """The broker's enqueue step."""
        self.broker._insert(self.tx, jobs, now, payloads)

    def schedule(self, groups: Sequence[tuple[str, str]]) -> None:
        """Make the groups due now (a new row takes the next round-robin place)."""
        self.many(
            SCHEDULE,
            [(queue, grp, self.tx.next_seq()) for queue, grp in groups],
        )
