"""Waiting on one job and the async producer calls: the defaults every backend inherits.

``JobWaits`` is part of the Broker protocol (``base.JobStore`` inherits it): ``watch`` (what
``JobHandle.wait`` uses) is built on ``change_cursor`` / ``wait_change``, which a backend
overrides with its own wake-up (memory: a condition; SQLite: ``PRAGMA data_version``; Redis:
XREAD of the queue's event stream); the default is a bounded backoff sleep. The ``*_async``
defaults run the synchronous call on a worker thread; Redis overrides them natively
(``redis/aio.py``), PostgreSQL overrides ``watch_async`` (``postgres/waits.py``: no thread held
while it waits).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.job import Job
from ..core.state import TERMINAL_STATES

if TYPE_CHECKING:
    from .base import EnqueueResult

#: Longest single ``wait_change`` inside ``watch`` (the loop re-reads the job after each).
WAIT_SLICE = 5.0
#: Longest ``watch`` a default ``watch_async`` runs on a worker thread at a time.
ASYNC_SLICE = 1.0


class JobWaits:
    """Waiting on a job and async producer calls, with defaults (see the module docstring)."""

    def get(self, job_id: str) -> Job | None:
        """A fresh snapshot of the job, or None (``JobReads.get``)."""
        raise NotImplementedError

    def enqueue(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """Store new jobs atomically (``JobStore.enqueue``)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- waiting on one job
    def change_cursor(self, queue: str) -> Any:
        """An opaque mark of "now" for ``wait_change``; take it BEFORE reading a job's state,
        so a change between the read and the wait still ends the wait (default: a round count).
        """
        return 0

    def wait_change(self, queue: str, job_id: str, cursor: Any, timeout: float) -> Any:
        """Block up to ``timeout`` s or until something that may concern ``job_id`` (of
        ``queue``) changed since ``cursor``; return the cursor to pass next time.

        Backends that can be woken (memory: a condition; SQLite: ``PRAGMA data_version``;
        Redis: the queue's event stream) return soon after the job finishes. This default has
        nothing to wake it: it sleeps a bounded backoff (5 ms, doubling, at most 200 ms).
        """
        import time

        rounds = int(cursor)
        time.sleep(max(0.0, min(timeout, 0.005 * 2 ** min(rounds, 6))))
        return rounds + 1

    def watch(self, job_id: str, queue: str, timeout: float) -> Job | None:
        """Wait up to ``timeout`` s for the job to reach a terminal state; return its latest
        snapshot (terminal, or not yet when time ran out), or None if it does not exist."""
        import time

        end = time.monotonic() + timeout
        cursor = self.change_cursor(queue)
        while True:
            job = self.get(job_id)
            left = end - time.monotonic()
            if job is None or job.state in TERMINAL_STATES or left <= 0:
                return job
            cursor = self.wait_change(queue, job_id, cursor, min(left, WAIT_SLICE))

    # ----------------------------------------------------------------- async producers
    async def enqueue_async(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """``enqueue`` for async callers: by default on a worker thread (``asyncio.to_thread``),
        so the event loop never blocks; Redis overrides it with its native async client."""
        import asyncio

        return await asyncio.to_thread(self.enqueue, jobs, now, payloads, fresh_ids=fresh_ids)

    async def get_async(self, job_id: str) -> Job | None:
        """``get`` for async callers (a worker thread by default)."""
        import asyncio

        return await asyncio.to_thread(self.get, job_id)

    async def watch_async(self, job_id: str, queue: str, timeout: float) -> Job | None:
        """``watch`` for async callers. By default ``watch`` runs on a worker thread in slices
        of at most ``ASYNC_SLICE`` s, so a cancelled waiter leaves no thread blocked for long."""
        import asyncio
        import time

        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            job = await asyncio.to_thread(
                self.watch, job_id, queue, max(0.0, min(left, ASYNC_SLICE))
            )
            if job is None or job.state in TERMINAL_STATES or end - time.monotonic() <= 0:
                return job
