"""One write transaction of the PostgreSQL backend (``Tx``): lazy BEGIN, deferred statements,
the hot round trips on libpq's pipeline (``postgres/wire.py``), and what COMMIT settles
(events, count deltas, finished pairs, NOTIFYs: ``postgres/commit.py``). ``PgStore._write``
opens one; ``postgres/store.py`` re-exports it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg

from ..ledger import Ledger
from . import wire


class Tx(Ledger):
    """One transaction and what to settle before COMMIT: events, count deltas, finished
    (queue, state) pairs, queues to NOTIFY (ready jobs: ``notify``; finished or deleted jobs,
    for their waiters: ``done``).

    A transaction of ``PgStore._write`` begins lazily: the first use of ``conn`` sends BEGIN,
    and ``first`` sends BEGIN together with the first statement (one round trip, psycopg
    pipeline mode); ``rows`` / ``first_two`` do the same on libpq's pipeline directly
    (``postgres/wire.py``: the claim's and the completion's first round trip), and
    ``postgres/commit.py`` sends the deferred statements, the settle statement, the retention
    caps and COMMIT in one batch there too. ``own`` is
    False for the caller's transaction (``enqueue_in_transaction``): never begun here."""

    def __init__(self, conn: psycopg.Connection[Any], *, own: bool = False) -> None:
        self._conn = conn
        self.begun = not own
        #: statements whose result nobody reads, sent with the next one (``defer``)
        self.deferred: list[tuple[str, Sequence[Any] | dict[str, Any]]] = []
        self.events: list[dict[str, Any]] = []
        self.deltas: dict[tuple[str, str], int] = {}
        self.finished: set[tuple[str, str]] = set()
        self.notify: set[str] = set()
        self.done: set[str] = set()

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The transaction's connection; BEGIN and the deferred statements are sent first."""
        if not self.begun or self.deferred:
            with self._conn.pipeline():
                self.send_pending()
        return self._conn

    def defer(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> None:
        """Run ``sql`` (prepared) before the next statement, in its round trip: for a write
        whose result nobody reads (the completion's ``UPDATE``; then the settle statement)."""
        self.deferred.append((sql, params))

    def send_pending(self) -> None:
        """Queue BEGIN (if not begun) and the deferred statements; the caller is in pipeline
        mode and syncs."""
        conn = self._conn
        if not self.begun:
            conn.execute("BEGIN")
            self.begun = True
        for sql, params in self.deferred:
            conn.execute(sql, params, prepare=True)
        self.deferred.clear()

    def first(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, binary: bool = False
    ) -> psycopg.Cursor[Any]:
        """Run ``sql`` (prepared), with BEGIN and the deferred statements in its round trip;
        ``binary``: rows in binary format (no text parsing of numbers and bytea)."""
        conn = self._conn
        if self.begun and not self.deferred:
            return conn.execute(sql, params, prepare=True, binary=binary)
        with conn.pipeline():
            self.send_pending()
            cur = conn.execute(sql, params, prepare=True, binary=binary)
        return cur

    def rows(
        self, sql: str, params: Sequence[Any] | dict[str, Any], *, binary: bool = False
    ) -> list[Any]:
        """``first``'s rows; on libpq's pipeline directly (``postgres/wire.py``) when every
        parameter is a plain scalar: the hot statements whose rows the broker reads."""
        return self.first_two(None, (sql, params), binary=binary)[1]

    def first_two(
        self,
        one: tuple[str, Sequence[Any]] | None,
        two: tuple[str, Sequence[Any] | dict[str, Any]],
        *,
        binary: bool = True,
    ) -> tuple[list[Any], list[Any]]:
        """The rows of two prepared statements (the second's in binary format when
        ``binary``) sent with BEGIN and the deferred statements in one round trip; ``one``
        None: the second alone. Through ``wire.rows`` when the parameters allow it."""
        batch: list[tuple[str, Any]] = [] if self.begun else [("BEGIN", ())]
        batch += [*self.deferred, *([one] if one else []), two]
        if wire.encodable(batch):
            self.begun = True  # BEGIN is on its way: a failure must roll back
            self.deferred.clear()
            got = wire.rows(self._conn, batch, (len(batch) - 1,) if binary else ())
            return (got[-2] if one else []), got[-1]
        conn = self._conn
        with conn.pipeline():
            self.send_pending()
            first = conn.execute(one[0], one[1], prepare=True) if one else None
            second = conn.execute(two[0], two[1], prepare=True, binary=binary)
        return (first.fetchall() if first else []), second.fetchall()

    def rollback(self) -> None:
        """End a begun transaction that failed (the connection may be broken: then nothing)."""
        if self.begun and not self._conn.closed:
            ours = wire.forget(self._conn)  # and the server's copies (``wire.forget``)
            with contextlib.suppress(psycopg.Error):
                self._conn.execute(wire.ROLLBACK_ALL if ours else "ROLLBACK")
