"""Job reads of the PostgreSQL backend (get, peek, search, oldest pending) and the wake-ups
(``wait_for_work``: LISTEN/NOTIFY plus a safety poll). Rows decode through ``rec.pg_rec``
(the SQLite backend's ``Rec`` plus the claim overlay). Transitions live in ``broker.py``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from ...core.state import JobState
from ..base import Page, SearchQuery
from ..sqlite_store import _icontains, _text_match
from .rec import COLS, pg_rec
from .store import PgStore

READY = "queue = %s AND state = 'pending' AND grp IS NULL ORDER BY priority, seq"  # as the claim
#: A lost NOTIFY (a dropped listener connection, a restart) delays a pickup at most this long.
SAFETY_POLL_S = 1.0
#: The look of a wake-up connection LISTENing again (``PgReads._listen_again``), prepared once
#: on that connection: is a job of ``$1`` ready, or a delayed one due before ``$2`` (the last
#: claim's ``next_due``)?
_LOOK = (
    "PREPARE conveyor_look(text[], float8) AS SELECT EXISTS (SELECT 1 FROM {S}.jobs j WHERE"
    " j.queue = ANY($1) AND j.state = 'pending' AND NOT EXISTS (SELECT 1 FROM {S}.queues p"
    " WHERE p.name = j.queue AND p.paused)) OR EXISTS (SELECT 1 FROM {S}.jobs WHERE queue ="
    " ANY($1) AND state IN ('scheduled', 'retry_scheduled') AND due_at < $2)"
)
#: ... in one simple query: the LISTEN in a transaction of its own (committed: it receives
#: every NOTIFY committed after it), then the look in the next transaction (its snapshot
#: taken after that COMMIT)
_RELISTEN = "BEGIN; LISTEN {ch}; COMMIT; EXECUTE conveyor_look({q}, {due})"
_SEARCH = {
    "id": "id >= %(id)s AND id < %(id)s || chr(1114111)",
    "state": "state = %(state)s",
    "task": "task = %(task)s",
    "queue": "queue = %(queue)s",
    "since": "created_at >= %(since)s",
    "until": "created_at < %(until)s",
}  # indexed: id (prefix), state, task, queue, time; error and text are filtered in Python


#: The total of a search filtered by state and/or queue only: from the counts (no scan).
_COUNTED_TOTAL = (
    "SELECT COALESCE(sum(n), 0) FROM (SELECT queue, state, n FROM {S}.counts UNION ALL"
    " SELECT queue, state, d FROM {S}.counts_log) t WHERE state = COALESCE(%(state)s, state)"
    " AND queue = COALESCE(%(queue)s, queue)"
)


#: Searches matching at most this many jobs gather them all and sort them (``_GATHERED``)
#: instead of walking a ``created_at`` index newest first: a walk hoping to meet rare matches
#: can read the whole index (101 ms at 1M jobs before; docs/architecture-postgres.md).
GATHER = 2000
_ORDER = "ORDER BY created_at DESC, id DESC"
#: The page of a search with few matches: the row ids of its first ``top`` matches (and the
#: ties at the cut) first, planned on their own (a MATERIALIZED CTE) and ordered by an
#: expression no index provides, so the planner reads the filters' index range (index-only
#: where the index carries the filters and ``rid``) and keeps the newest in a top-N sort instead
#: of walking ``jobs_created`` hoping to meet them; then those rows, sorted exactly.
_GATHERED = (
    "WITH m AS MATERIALIZED (SELECT rid FROM {found} ORDER BY created_at + 0 DESC"
    " FETCH FIRST %(top)s ROWS WITH TIES) SELECT {cols} FROM {{S}}.jobs"
    " WHERE rid IN (SELECT rid FROM m) {order} LIMIT %(lim)s OFFSET %(off)s"
)


def _matching(where: str, state: str | None, top: bool = False, split: bool = False) -> str:
    """The FROM item of the jobs a search matches (``where``), shaped for the indexes: the
    search indexes by state, queue and task leave out running jobs (schema version 4: a claim
    then adds no entry to them), so running jobs are read through ``jobs_lease`` (every
    active row, and only an active row, has a lease deadline) and, without a state filter,
    appended to the others (``UNION ALL``). ``top``: each part keeps only its first
    ``%(top)s`` rows newest first, so each walks its index backwards and stops; with ``split``
    (a queue or task filter: their indexes lead with the state, schema version 5) the
    not-running part is one such part per state, each an exact range of the queue's or
    task's index, merged (``Merge Append``) — never a walk of ``jobs_created`` that a rare
    queue or task would read to its end."""
    jobs, order = "{S}.jobs", " ORDER BY created_at DESC, id DESC LIMIT %(top)s" if top else ""
    if state == "active":
        return f"(SELECT * FROM {jobs} WHERE {where} AND lease_at IS NOT NULL) j"
    if state is not None:  # implies state <> 'active': the partial indexes apply
        return f"{jobs} j WHERE {where}"
    running = (
        f"(SELECT * FROM {jobs} WHERE {where} AND state = 'active' AND lease_at IS NOT NULL{order})"
    )
    if top and split:
        parts = [f"(SELECT * FROM {jobs} WHERE {where} AND state = '{s}'{order})" for s in _RESTING]
        return f"({' UNION ALL '.join([*parts, running])}) j"
    return (
        f"((SELECT * FROM {jobs} WHERE {where} AND state <> 'active'{order}) UNION ALL {running}) j"
    )


#: every state but ``active`` (constants of the code, never user input)
_RESTING = [str(s) for s in JobState if s is not JobState.ACTIVE]


class PgReads(PgStore):
    """The read-only job queries and ``wait_for_work`` of ``PostgresBroker``."""

    def get(self, job_id: str) -> Any:
        """A fresh snapshot, or None (a corrupt row reads as a stub built from its columns)."""
        if "\x00" in job_id:
            return None  # text cannot hold NUL: no job has this id (psycopg would raise)
        rows = self._read(f"SELECT {COLS} FROM {{S}}.jobs WHERE id = %s", (job_id,))
        return pg_rec(rows[0]).job if rows else None

    def peek(self, queue: str, n: int = 10) -> list[Any]:
        """The next ``n`` ready jobs of ``queue`` in claim order."""
        sql = f"SELECT {COLS} FROM {{S}}.jobs WHERE {READY} LIMIT %s"
        return [pg_rec(r).job for r in self._read(sql, (queue, n))]

    def search(self, query: SearchQuery) -> Page:
        """Filter in SQL (an index narrows first), newest first, one page.

        ``error`` and ``text`` are substring filters over every matching row (no index can
        help them): those rows are filtered in Python exactly as the other backends do.
        """
        q = query
        p: dict[str, Any] = {
            "id": q.id or None,
            "state": str(q.state) if q.state else None,
            "task": q.task or None,
            "queue": q.queue or None,
            "since": q.since,
            "until": q.until,
        }
        where = " AND ".join(sql for key, sql in _SEARCH.items() if p[key] is not None) or "true"
        offset, size = (max(1, q.page) - 1) * q.page_size, q.page_size
        found = _matching(where, p["state"])
        if not q.error and not q.text:
            counted = all(p[k] is None for k in _SEARCH if k not in ("state", "queue"))
            total = int(
                self._read(_COUNTED_TOTAL if counted else f"SELECT count(*) FROM {found}", p)[0][0]
            )
            rows = self._page(where, p, total, offset, size)
            return Page([pg_rec(r).job for r in rows], total, q.page, size)
        rids = [
            r[0]
            for r in self._read(f"SELECT rid, last_error, payload FROM {found} {_ORDER}", p)
            if (not q.error or _icontains(r[1], q.error.lower()))
            and (not q.text or _text_match(r[2], q.text.lower().encode()))
        ]
        chosen = rids[offset : offset + size]
        rows = self._read(f"SELECT {COLS} FROM {{S}}.jobs WHERE rid = ANY(%s) {_ORDER}", (chosen,))
        return Page([pg_rec(r).job for r in rows], len(rids), q.page, size)

    def _page(self, where: str, p: dict[str, Any], total: int, offset: int, size: int) -> list[Any]:
        """The rows of one search page, ``total`` (exact, read first) choosing the shape: none
        past the end (nothing matches: no statement); at most ``GATHER`` matches: all of them
        gathered (``_GATHERED``), then sorted; more: the index walked newest first (``top``),
        dense enough to stop soon."""
        if offset >= total:
            return []
        page = p | {"lim": size, "off": offset, "top": size + offset}
        if total <= GATHER:
            found = _matching(where, p["state"])
            return self._read(_GATHERED.format(cols=COLS, found=found, order=_ORDER), page)
        split = p["queue"] is not None or p["task"] is not None
        found = _matching(where, p["state"], True, split)
        return self._read(f"SELECT {COLS} FROM {found} {_ORDER} LIMIT %(lim)s OFFSET %(off)s", page)

    def oldest_pending(self, queue: str) -> float | None:
        """Ready time (run_at, or created_at when run_at is 0) of the oldest pending job."""
        sql = (
            "SELECT min({}) FROM {{S}}.jobs WHERE queue = %s AND state = 'pending' AND run_at {} 0"
        )
        found = [
            self._read(sql.format(col, op), (queue,))[0][0]
            for col, op in (("run_at", "!="), ("created_at", "="))
        ]
        return min((float(t) for t in found if t is not None), default=None)

    # ------------------------------------------------------------------ wake-ups
    def _listener(self) -> psycopg.Connection[Any] | None:
        """This thread's wake-up connection if it has one (open, of this process), else None."""
        local = self._local
        conn: psycopg.Connection[Any] | None = getattr(local, "listener", None)
        if conn is not None and not conn.closed and getattr(local, "pid", 0) == os.getpid():
            return conn
        return None

    def _open_listener(self) -> psycopg.Connection[Any] | None:
        """Open this thread's wake-up connection (None if unreachable), not LISTENing yet:
        the wait that opens it LISTENs and looks in one round trip (``_listen_again``), the
        look seeing what no NOTIFY could tell it since the thread's last claim. Only a wait
        opens it, never a claim: ``app.dequeue`` claims but never waits, and a pull consumer
        would hold a connection for nothing (signalled at every NOTIFY while it LISTENs)."""
        local = self._local
        try:
            conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)
        except psycopg.Error:
            return None
        local.listener, local.pid, local.deaf, local.look = conn, os.getpid(), True, False
        with self._lock:
            self._listeners.append(conn)
        return conn

    def wait_for_work(self, queues: Sequence[str], timeout: float, *, due: bool = False) -> None:
        """Return when a job may be ready in ``queues``, or after ``timeout`` s.

        Wakes on a NOTIFY naming one of ``queues`` (sent by enqueue, release, requeue, a
        retry, a reaped lease, resume: delivered only at COMMIT, so a woken worker always finds
        the committed job). Every ``SAFETY_POLL_S`` it also looks for a ready job itself, in
        case a notification was lost (a dropped connection). Notifications that arrive while
        the worker is busy wait in the connection and end the next wait at once; after a
        claim that filled its slots the connection does not LISTEN (``_after_claim``): this
        wait LISTENs again and looks once instead (``_listen_again``).
        """
        deadline = time.monotonic() + timeout
        conn = self._listener() or self._open_listener()
        wanted = set(queues)
        if conn is None:
            time.sleep(min(timeout, SAFETY_POLL_S))
            return
        if getattr(self._local, "deaf", False) and not self._listen_again(conn, queues):
            return  # missed meanwhile: a ready job or an earlier due time (or no connection)
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                for note in conn.notifies(timeout=min(remaining, SAFETY_POLL_S)):
                    if not note.payload or note.payload in wanted:
                        return
            except psycopg.Error:
                self._drop_listener(conn)
                time.sleep(min(max(deadline - time.monotonic(), 0), 0.2))
                return
            if deadline - time.monotonic() > 0 and self._has_ready(queues):
                return

    def _drain_notifies(self) -> None:
        """Before a claim: discard the NOTIFYs this thread's wake-up connection already
        received (the claim sees their jobs), so the connection's queue never grows. Nothing
        when the thread has none (a claim never opens it: ``_open_listener``) or when it does
        not LISTEN (after a claim that filled its slots, ``_after_claim``): the next wait
        LISTENs and looks."""
        conn = self._listener()
        if conn is None or getattr(self._local, "deaf", False):
            return
        try:
            for _ in conn.notifies(timeout=0):
                pass
        except psycopg.Error:
            self._drop_listener(conn)

    def _after_claim(self, got: int, limit: int, next_due: float | None) -> None:
        """After a claim of ``got`` jobs out of ``limit``: a full claim leaves the worker no
        free slot to wait for work with (its next step is another claim), so this thread's
        wake-up connection stops LISTENing: PostgreSQL signals every LISTENing backend of the
        database at each NOTIFY, and each signalled backend runs a transaction, so a busy
        worker cost the server one per enqueue. The next ``wait_for_work`` LISTENs again
        (``_listen_again``). ``next_due``: what a short claim reported, for that wait's look."""
        local = self._local
        local.next_due = next_due
        conn: psycopg.Connection[Any] | None = getattr(local, "listener", None)
        if got < limit or conn is None or getattr(local, "deaf", False):
            return
        if getattr(local, "pid", 0) != os.getpid():
            return  # the parent's connection (a fork): never touched from this process
        try:
            conn.execute("UNLISTEN *")
        except psycopg.Error:
            self._drop_listener(conn)
            return
        local.deaf = True

    def _listen_again(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> bool:
        """LISTEN again after a full claim (or for the first time on a connection just
        opened), then look once for what no NOTIFY told this connection meanwhile: a ready
        job, or a delayed one due before the ``next_due`` the last claim reported (the NOTIFY
        would have made the worker claim again and learn it; a thread that never claimed
        knows no due time: only a ready job counts). One round trip: the LISTEN commits
        before the look's snapshot is taken (``_RELISTEN``), so a job committed before the
        LISTEN is seen by the look and one committed after it sends a NOTIFY this connection
        receives. False: do not wait (work was missed, or the connection failed: the caller
        claims again)."""
        due = getattr(self._local, "next_due", -math.inf)  # -inf: no claim on this thread
        query = sql.SQL(_RELISTEN).format(
            ch=sql.Identifier(self.channel),
            q=sql.Literal(list(queues)),
            due=sql.Literal(math.inf if due is None else float(due)),
        )
        try:
            if not getattr(self._local, "look", False):  # once per connection
                conn.execute(sql.SQL(_LOOK).format(S=sql.SQL(self.s)))  # the quoted schema
                self._local.look = True
            cur = conn.execute(query)
            while cur.nextset():  # BEGIN, LISTEN, COMMIT, then the look's row
                pass
            missed = bool(cur.fetchone()[0])  # type: ignore[index]
        except psycopg.Error:
            self._drop_listener(conn)
            return False
        self._local.deaf = False
        return not missed

    def _drop_listener(self, conn: psycopg.Connection[Any]) -> None:
        self._local.deaf = False
        self._local.listener = None
        with contextlib.suppress(Exception):
            conn.close()

    def _has_ready(self, queues: Sequence[str]) -> bool:
        rows = self._read(
            "SELECT 1 FROM {S}.jobs j WHERE j.queue = ANY(%s) AND j.state = 'pending' AND NOT"
            " EXISTS (SELECT 1 FROM {S}.queues q WHERE q.name = j.queue AND q.paused) LIMIT 1",
            (list(queues),),
        )
        return bool(rows)
