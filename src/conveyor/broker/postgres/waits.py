"""Waiting on one job on PostgreSQL (``JobHandle.wait``): LISTEN on the "done" channel.

Every transaction that finishes a job (completed, dead-lettered, cancelled) or deletes one
sends ``pg_notify('conveyor.done_<schema>', queue)``, delivered at COMMIT only (``Tx.done``:
one notification per queue per transaction, however many jobs it finished). One daemon thread
per process (``DoneListener``) holds the LISTENing connection and counts the notifications per
queue; ``change_cursor`` returns those counts for the waiter's queue and ``wait_change`` blocks
on a condition until they move. So a waiter returns a few ms after the commit and reads its job
once per wake-up, and a thousand waiting threads cost one connection, not a thousand.

Nobody waiting, no NOTIFY: PostgreSQL signals every LISTENing backend of the database at each
NOTIFY, whatever its channel, and each signalled backend runs a transaction to read it (in a
drain, one per completion batch on the worker's own wake-up connection). So the listener holds
an advisory lock (``done_key``, shared, taken after its LISTEN) for as long as it listens, and a
finishing transaction's settle statement sends the done NOTIFY only when its try for that lock
(exclusive, until COMMIT) fails (``postgres/commit.py``). A listener that starts while such a
transaction holds the lock waits for its COMMIT before it reports ready, so a waiter, which
reads its job after that, cannot miss it.

Lost notifications: while the listener is reconnecting (a killed connection, a server restart)
nothing is delivered, so each wait is at most ``SAFETY_POLL_S`` long (``watch`` re-reads the job
after it) and a reconnect wakes every waiter. Without a listener at all (the server unreachable
when the wait began) ``wait_change`` sleeps that bounded slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

from ...core.job import Job
from ...core.state import TERMINAL_STATES
from .reads import SAFETY_POLL_S

#: How long ``change_cursor`` waits for a new listener's LISTEN (then it falls back to polling).
LISTEN_START_S = 2.0
#: The listener's longest block between two looks at its stop flag.
LISTEN_SLICE_S = 0.5


class DoneListener:
    """One LISTENing connection per process; counts "done" notifications per queue."""

    def __init__(self, conninfo: str, channel: str, key: int) -> None:
        self.conninfo, self.channel, self.pid = conninfo, channel, os.getpid()
        self.key = key  # the advisory lock held (shared) while listening (module docstring)
        self._cond = threading.Condition()
        self._per_queue: dict[str, int] = {}
        self._everyone = 0  # bumped by an unnamed notification and by each (re)connect
        self._connected = False
        self._stop = False
        self._born = time.monotonic()
        #: the async waiters (``wait_async``): their mark, loop and future, woken from here
        self._futures: dict[asyncio.Future[None], tuple[str, Any, asyncio.AbstractEventLoop]] = {}
        self._thread = threading.Thread(target=self._run, name="conveyor-pg-done", daemon=True)
        self._thread.start()

    def mark(self, queue: str) -> tuple[int, int] | None:
        """The counts for ``queue`` now, once LISTEN is active; None if it is not. Only in
        the listener's first ``LISTEN_START_S`` does this wait for the connection."""
        with self._cond:
            if not self._connected:
                left = self._born + LISTEN_START_S - time.monotonic()
                self._cond.wait_for(lambda: self._connected or self._stop, max(left, 0.0))
            if not self._connected:
                return None
            return self._per_queue.get(queue, 0), self._everyone

    def wait(self, queue: str, mark: tuple[int, int], timeout: float) -> tuple[int, int] | None:
        """Block until the counts for ``queue`` move past ``mark`` or ``timeout`` s pass."""
        with self._cond:
            self._cond.wait_for(
                lambda: (self._per_queue.get(queue, 0), self._everyone) != mark or self._stop,
                timeout,
            )
            if not self._connected:
                return None
            return self._per_queue.get(queue, 0), self._everyone

    async def wait_async(
        self, queue: str, mark: tuple[int, int] | None, timeout: float
    ) -> tuple[int, int] | None:
        """``wait`` for async callers: sleeps on a future this listener's thread resolves
        (``_wake_async``), so a waiter holds no thread. ``mark`` None: wait for the connection
        (what ``mark`` does in the listener's first ``LISTEN_START_S``)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cond:
            waiting = not self._moved(queue, mark)
            if waiting:
                self._futures[fut] = (queue, mark, loop)
        try:
            if waiting:
                await asyncio.wait({fut}, timeout=timeout)
        finally:
            with self._cond:
                self._futures.pop(fut, None)
        with self._cond:
            return (self._per_queue.get(queue, 0), self._everyone) if self._connected else None

    def start_left(self) -> float:
        """How long a first wait may still wait for the LISTEN (``LISTEN_START_S`` after
        the listener started; then it falls back to polling)."""
        return max(0.0, self._born + LISTEN_START_S - time.monotonic())

    def _moved(self, queue: str, mark: tuple[int, int] | None) -> bool:
        """Under ``_cond``: whether an async waiter on ``queue`` at ``mark`` may go on."""
        if self._stop:
            return True
        if mark is None:
            return self._connected
        return (self._per_queue.get(queue, 0), self._everyone) != mark

    def _wake_async(self) -> None:
        """Under ``_cond``, after a count moved: resolve the futures of the async waiters that
        may go on, each on its own loop (a closed loop: its waiter is gone)."""
        for fut, (queue, mark, loop) in list(self._futures.items()):
            if self._moved(queue, mark):
                del self._futures[fut]
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve, fut)

    def close(self) -> None:
        """Stop the thread (within ``LISTEN_SLICE_S``; it closes its own connection)."""
        with self._cond:
            self._stop = True
            self._connected = False
            self._cond.notify_all()
            self._wake_async()

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        pause = 0.1
        while not self._stop:
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    # from here on no transaction finishing a job can skip the NOTIFY; one
                    # that already did holds the lock exclusively until its COMMIT, so this
                    # waits for it: a waiter reads its job only after that commit
                    conn.execute("SELECT pg_advisory_lock_shared(%s)", (self.key,))
                    self._set_connected(True)
                    pause = 0.1
                    self._listen(conn)
            except psycopg.Error:
                pass  # dropped or unreachable: waiters fall back to their bounded slices
            self._set_connected(False)
            if not self._stop:
                time.sleep(pause)
                pause = min(pause * 2, SAFETY_POLL_S)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        while not self._stop:
            for note in conn.notifies(timeout=LISTEN_SLICE_S):  # yields each as it arrives
                with self._cond:
                    if note.payload:
                        self._per_queue[note.payload] = self._per_queue.get(note.payload, 0) + 1
                    else:
                        self._everyone += 1
                    self._cond.notify_all()
                    self._wake_async()

    def _set_connected(self, up: bool) -> None:
        with self._cond:
            self._connected = up and not self._stop
            self._everyone += 1  # a (re)connect may follow lost notifications: wake everyone
            self._cond.notify_all()
            self._wake_async()


def _resolve(fut: asyncio.Future[None]) -> None:
    """On the waiter's loop: end its wait (unless it ended already: a timeout, a cancel)."""
    if not fut.done():
        fut.set_result(None)


class PgWaits:
    """``change_cursor`` / ``wait_change`` of ``PostgresBroker`` (see the module docstring)."""

    conninfo: str
    done_channel: str  # ``conveyor.done_<schema>``: the ``.`` keeps it apart from the wake channel
    done_key: int  # its advisory lock (``store.done_lock_key``)
    _lock: threading.Lock
    _done: DoneListener | None = None

    def _done_listener(self) -> DoneListener:
        """This process's listener (started on first use; a forked child starts its own)."""
        listener = self._done
        if listener is None or listener.pid != os.getpid():
            with self._lock:
                listener = self._done
                if listener is None or listener.pid != os.getpid():
                    listener = self._done = DoneListener(
                        self.conninfo, self.done_channel, self.done_key
                    )
        return listener

    def change_cursor(self, queue: str) -> Any:
        """The done-counts of ``queue`` (LISTEN is active from here on), or None."""
        return self._done_listener().mark(queue)

    def wait_change(self, queue: str, job_id: str, cursor: Any, timeout: float) -> Any:
        """Return once a job of ``queue`` finished since ``cursor`` (or after ``timeout``,
        at most ``SAFETY_POLL_S``); the cursor to pass next time."""
        timeout = max(0.0, min(timeout, SAFETY_POLL_S))
        if cursor is None:  # no listener when the wait began: a bounded sleep, then try again
            time.sleep(timeout)
            return self.change_cursor(queue) if timeout else None
        return self._done_listener().wait(queue, cursor, timeout)

    async def watch_async(self, job_id: str, queue: str, timeout: float) -> Job | None:
        """``watch`` for async callers, holding no thread while it waits: between two reads
        of the job (each on a worker thread, a few ms) it sleeps on a future the "done"
        listener resolves (``DoneListener.wait_async``). The default (``broker/waits.py``)
        ran ``watch`` on a worker thread in one-second slices: 200 waiters kept the event
        loop's default executor (``min(32, cpus + 4)`` threads) busy, and every other
        ``asyncio.to_thread`` call of the application queued behind them."""
        end = time.monotonic() + timeout
        listener = self._done_listener()
        cursor = await listener.wait_async(queue, None, listener.start_left())
        while True:
            job: Job | None = await asyncio.to_thread(self.get, job_id)  # type: ignore[attr-defined]
            left = end - time.monotonic()
            if job is None or job.state in TERMINAL_STATES or left <= 0:
                return job
            slice_s = max(0.0, min(left, SAFETY_POLL_S))
            if cursor is None:  # no listener when the wait began: a bounded sleep, then again
                await asyncio.sleep(slice_s)
                listener = self._done_listener()
                cursor = await listener.wait_async(queue, None, 0.0)
            else:
                cursor = await listener.wait_async(queue, cursor, slice_s)

    def _close_waits(self) -> None:
        """Stop this process's listener (``close``); a later wait starts a new one."""
        with self._lock:
            listener, self._done = self._done, None
        if listener is not None and listener.pid == os.getpid():
            with contextlib.suppress(Exception):
                listener.close()
