"""Job rows of the SQLite backend: decoding a row (``_Rec``) and the read-only queries (get,
peek, search, oldest pending, waiting for work). Reads run outside transactions (WAL readers
never block the writer), each through ``SqliteStore._read``. Transitions live in ``sqlite.py``
and its mixins.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from ..core.job import Job
from ..core.serialization import job_from_dict, job_to_dict
from ..core.state import JobState
from ..core.stored import check_int_fields, check_nesting
from ..errors import DecodeError
from .base import Page, SearchQuery
from .sqlite_store import SqliteStore

COLS = (
    "rid, id, queue, task, state, priority, run_at, created_at, finished_at, last_error,"
    " payload"
)  # the row layout Rec reads
# How often an idle worker checks PRAGMA data_version: ~200 cheap reads a second buy a pickup
# latency of a few ms (at 50 ms, p50 was ~27 ms and p99 ~55 ms in bench/).
WAKE_POLL_S = 0.005
#: Shortest and longest pause between two ``data_version`` reads of ``wait_change`` (a job's
#: waiter): a tenth of the time waited so far, within these bounds.
CHANGE_POLL_MIN_S = 0.002
CHANGE_POLL_MAX_S = 0.05
READY = "queue = ? AND state = 'pending' AND grp IS NULL ORDER BY priority, seq LIMIT ?"
_SEARCH = {
    "id": "id >= :id AND id < :id || char(1114111)",
    "state": "state = :state",
    "task": "task = :task",
    "queue": "queue = :queue",
    "since": "created_at >= :since",
    "until": "created_at < :until",
    "error": "cv_icontains(last_error, :error)",
    "text": "cv_text(payload, :text)",
}  # indexed: id (prefix), state, task, queue, time
_COUNTED = ("state", "queue")
_COUNTED_TOTAL = (
    "SELECT COALESCE(SUM(n), 0) FROM counts WHERE queue != '' AND state ="
    " COALESCE(:state, state) AND queue = COALESCE(:queue, queue)"
)
#: The finished rows of one queue and state (params: queue, state): retention and purge.
FINISHED = "queue = ? AND state = ? AND finished_at IS NOT NULL"
#: The earliest delayed run_at and the earliest lease deadline (any queue; two index lookups).
NEXT_DUE = (
    "SELECT (SELECT MIN(due_at) FROM jobs WHERE due_at IS NOT NULL),"
    " (SELECT MIN(lease_at) FROM jobs WHERE lease_at IS NOT NULL)"
)
_BLANK: dict[str, Any] = {"args": [], "kwargs": {}, "metadata": {}, "result": None}
_KEEP = object()  # "result unchanged": the stored encoded result passes through


class Rec:
    """A job row: the Job (a stub from the columns if the payload is corrupt), its envelope dict,
    the original bytes of a corrupt payload, and the state the row had (for ``counts``)."""

    __slots__ = ("corrupt", "data", "job", "rid", "row", "state")

    def __init__(self, row: tuple[Any, ...], full: bool) -> None:
        self.rid, self.state, raw, self.row = row[0], row[4], row[10], row
        self.corrupt: bytes | None = None
        self.data: dict[str, Any] | None = None
        try:
            data = orjson.loads(raw)
            if not isinstance(data, dict):
                raise DecodeError("envelope must be a JSON object")
            check_nesting(raw, data)  # what orjson could not have written (never recurse on it)
            check_int_fields(data)
            self.job = job_from_dict(data if full else {**data, **_BLANK})
            if (self.job.id, self.job.queue, str(self.job.state)) != (row[1], row[2], row[4]):
                raise DecodeError("envelope does not match its row (id, queue or state)")
            self.data, self.job.result = data, self.job.result if full else _KEEP
        except (DecodeError, orjson.JSONDecodeError, TypeError, ValueError, RecursionError) as exc:
            self.spoil(row, raw, exc)

    def spoil(self, row: tuple[Any, ...], raw: Any, exc: BaseException) -> None:
        """Treat the row as undecodable: a stub Job from its columns; the bytes kept as corrupt."""
        self.data = None
        self.job = Job(
            id=row[1],
            task=row[3],
            queue=row[2],
            priority=row[5],
            state=JobState(row[4]),
            run_at=row[6],
            created_at=row[7],
            finished_at=row[8],
            last_error=row[9] or f"decode_error: {exc}",
            metadata={"decode_error": str(exc)},
        )
        self.corrupt = raw if isinstance(raw, bytes) else str(raw).encode()

    def payload(self) -> bytes:
        """The envelope of the (changed) job; undecoded parts pass through as stored."""
        job, data = self.job, self.data
        if data is None:  # corrupt: the stored bytes stay until the job is dead-lettered
            return (
                orjson.dumps(job_to_dict(job))
                if job.state is JobState.DEAD_LETTER
                else self.corrupt or b""
            )
        saved = job.args, job.kwargs, job.metadata, job.result
        job.args, job.kwargs, job.metadata = [], {}, {}
        job.result = None if saved[3] is _KEEP else saved[3]
        try:
            out = job_to_dict(job)
        finally:
            job.args, job.kwargs, job.metadata, job.result = saved
        out.update(args=data.get("args"), kwargs=data.get("kwargs"), metadata=data.get("metadata"))
        if saved[3] is _KEEP:
            out["result"] = data.get("result")
        return orjson.dumps(out)


class SqliteReads(SqliteStore):
    """The read-only job queries of ``SqliteBroker``."""

    def get(self, job_id: str) -> Job | None:
        """A fresh snapshot, or None (a corrupt row reads as a stub built from its columns)."""
        sql = f"SELECT {COLS} FROM jobs WHERE id = ?"
        rows = self._read(sql, (job_id,))
        return Rec(rows[0], True).job if rows else None

    def peek(self, queue: str, n: int = 10) -> list[Job]:
        """The next ``n`` ready jobs of ``queue`` in claim order."""
        sql = f"SELECT {COLS} FROM jobs WHERE {READY}"
        return [Rec(row, True).job for row in self._read(sql, (queue, n))]

    def search(self, query: SearchQuery) -> Page:
        """Filter in SQL (an index narrows first), newest first, one page."""
        q = query
        p = {
            "id": q.id or None,
            "state": str(q.state) if q.state else None,
            "task": q.task or None,
            "queue": q.queue or None,
            "since": q.since,
            "until": q.until,
            "error": q.error.lower() if q.error else None,
            "text": q.text.lower().encode() if q.text else None,
            "limit": q.page_size,
            "offset": (max(1, q.page) - 1) * q.page_size,
        }
        where = " AND ".join(sql for key, sql in _SEARCH.items() if p[key] is not None) or "1"
        only_counts = all(p[k] is None for k in _SEARCH if k not in _COUNTED)
        total = self._read(
            _COUNTED_TOTAL
            if only_counts
            # no filter beyond state / queue
            else f"SELECT COUNT(*) FROM jobs WHERE {where}",
            p,
        )[0][0]
        order = "+created_at" if p["id"] else "created_at"  # "+": let the id index drive
        rows = self._read(
            f"SELECT {COLS} FROM jobs WHERE {where} ORDER BY {order} DESC,"
            " id DESC LIMIT :limit OFFSET :offset",
            p,
        )
        return Page([Rec(r, True).job for r in rows], int(total), q.page, q.page_size)

    def oldest_pending(self, queue: str) -> float | None:
        """Ready time (run_at, or created_at when run_at is 0) of the oldest pending job."""
        sql = "SELECT MIN({}) FROM jobs WHERE queue = ? AND state = 'pending' AND run_at {} 0"
        found = [
            self._read(sql.format(col, op), (queue,))[0][0]
            for col, op in (("run_at", "!="), ("created_at", "="))
        ]
        return min((float(t) for t in found if t is not None), default=None)

    def wait_for_work(self, queues: Sequence[str], timeout: float, *, due: bool = False) -> None:
        """Return when a ready job may exist in ``queues``, or after ``timeout`` s (exactly).

        Polls ``PRAGMA data_version`` (it changes when another connection commits) every
        ``WAKE_POLL_S`` and only then looks: no busy loop, and at most a few milliseconds of
        added pickup latency (the pragma reads shared memory, not the file). It returns when a
        pending job exists, or when the earliest due time (delayed run_at or lease deadline,
        ``NEXT_DUE``) moved earlier than it was: a delayed enqueue or a retry wakes the caller,
        which claims and learns the new ``next_due``. The baseline is what this thread's last
        empty claim saw (``claim_view``): a commit between that claim and this wait counts.
        No clock is read but the monotonic one.
        """
        deadline, version_sql = time.monotonic() + timeout, "PRAGMA data_version"
        view = getattr(self._local, "claim_view", None)
        self._local.claim_view = None
        version, known = (
            view
            if view is not None
            else (self._read(version_sql)[0][0], tuple(self._read(NEXT_DUE)[0]))
        )
        while not self._has_ready(queues) and not _earlier(self._read(NEXT_DUE)[0], known):
            while version == (version := self._read(version_sql)[0][0]):
                if (remaining := deadline - time.monotonic()) <= 0:
                    return
                time.sleep(min(remaining, WAKE_POLL_S))

    def change_cursor(self, queue: str) -> Any:
        """(this thread's ``PRAGMA data_version``, when the wait began): the version moves when
        another connection commits."""
        return (self._read("PRAGMA data_version")[0][0], time.monotonic())

    def wait_change(self, queue: str, job_id: str, cursor: Any, timeout: float) -> Any:
        """Return once another connection committed since ``cursor`` (or after ``timeout``).

        Polls ``PRAGMA data_version`` (shared memory, not the file) with a backoff that grows
        with the time waited so far: a tenth of it, at least ``CHANGE_POLL_MIN_S`` (2 ms) and at
        most ``CHANGE_POLL_MAX_S`` (50 ms). A waiter therefore learns of a finished job about
        10% of the job's run time late (a 20 ms job: ~2 ms; from 0.5 s on: at most ~50 ms), and
        a long wait, even on a busy database, costs ~20 version and job reads a second.
        Must run on the thread that took ``cursor`` (the version is per connection).
        """
        seen, began = cursor
        deadline = time.monotonic() + timeout
        while (version := self._read("PRAGMA data_version")[0][0]) == seen:
            now = time.monotonic()
            if now >= deadline:
                break
            pause = min(max((now - began) / 10, CHANGE_POLL_MIN_S), CHANGE_POLL_MAX_S)
            time.sleep(min(deadline - now, pause))
        return (version, began)

    def _has_ready(self, queues: Sequence[str]) -> bool:
        paused = {r[0] for r in self._read("SELECT name FROM queues WHERE paused = 1")}
        sql = "SELECT 1 FROM jobs WHERE queue = ? AND state = 'pending' LIMIT 1"
        return any(self._read(sql, (q,)) for q in queues if q not in paused)


def _earlier(now: tuple[Any, ...], before: tuple[Any, ...]) -> bool:
    """True if a due time of ``now`` (a ``NEXT_DUE`` row) is earlier than it was ``before``."""
    return any(t is not None and (b is None or t < b) for t, b in zip(now, before, strict=True))
