"""Lifecycle part of the Redis broker: server clock, idle waiting, waiting on one job (the
queue's event stream), flush, close."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ...errors import BrokerUnavailable
from . import fmtgate
from .plumbing import RedisBase, guarded

log = logging.getLogger("conveyor.redis")
BLPOP_SLACK = 0.11  # Redis expires a blocked BLPOP on a server cron tick: hz 10 = 100 ms
DUE_POLL = 0.004  # the wake lists are polled this often in the last BLPOP_SLACK s before a due time
WATCH_BLOCK = 1.0  # longest XREAD BLOCK of a job's waiter (wait_change)
WATCH_COUNT = 1000  # stream entries read per XREAD of a waiter


def watch_block(left: float, socket_timeout: float) -> int:
    """Milliseconds one XREAD BLOCK of a job's waiter may last: at most ``left``,
    ``WATCH_BLOCK`` and well under the client's ``socket_timeout`` (a block as long as the
    read timeout would end as a socket timeout, i.e. ``BrokerUnavailable``, instead of an
    empty reply); at least 1 ms (BLOCK 0 would block for ever)."""
    under = max(socket_timeout - 1.0, socket_timeout / 2)
    return max(1, int(min(left, WATCH_BLOCK, under) * 1000))


def scan_entries(entries: Sequence[Any], needle: bytes) -> tuple[Any, bool]:
    """(the last entry id, whether any entry's values contain ``needle``) of an XREAD reply."""
    hit = any(needle in value for _, fields in entries for value in fields.values())
    return entries[-1][0], hit


class LifecycleMixin(RedisBase):
    """``server_time``, ``wait_for_work``, ``flush_all`` and ``close`` of ``RedisBroker``."""

    @guarded
    def server_time(self) -> float | None:
        """Redis ``TIME`` in epoch seconds."""
        seconds, micros = self.client.time()
        return int(seconds) + int(micros) / 1_000_000

    def wait_for_work(self, queues: Sequence[str], timeout: float, *, due: bool = False) -> None:
        """Block on BLPOP of the queues' wake lists until a job may be ready or ``timeout``.

        Returns as soon as a marker is popped, without checking that its job is still ready
        (that would cost a round trip on every pickup): the caller's claim decides.

        Redis expires a BLPOP only on its server cron tick (``hz`` 10: up to 100 ms late), so
        with ``due`` (the timeout ends at a job's due time) BLPOP covers all but the last
        ``BLPOP_SLACK`` seconds and the rest is waited here, polling the wake lists with LPOP
        every ``DUE_POLL`` s: the caller wakes within a few ms of the due time and an enqueue
        still wakes it early. Plain idle waits (no ``due``) send one BLPOP and nothing else.

        While Redis is unreachable this sleeps for ``timeout`` instead of raising: waiting is
        all it promises, and the caller's next claim reports the outage (and backs off).
        """
        if timeout <= 0 or not queues:
            return
        began = time.monotonic()
        try:
            self._block(queues, timeout, due)
        except BrokerUnavailable:
            log.debug("wait_for_work: Redis unavailable", exc_info=True)
            time.sleep(max(0.0, timeout - (time.monotonic() - began)))

    def _wake_keys(self, queues: Sequence[str]) -> tuple[list[str], list[str]]:
        """The wake lists to wait on and the queues they belong to (none: the global list)."""
        if not self.cluster:
            names = list(queues)
        elif len(queues) == 1:
            names = [queues[0]]
        else:
            names = []
        return [self.keys.queue_key(q, "wake") for q in names] or [self.keys.global_wake], names

    def _woken(self, names: list[str], popped: Sequence[Any]) -> None:
        """Tell the idle-queue list (idlequeues.py) which queues' markers this wait popped
        (``popped``: truthy per wake list, in ``names`` order): their wake lists may now be
        empty, yet a job waits there."""
        if self._idle is not None and names:
            for name, got in zip(names, popped, strict=True):
                if got:
                    self._idle.woken(name)

    @guarded
    def _block(self, queues: Sequence[str], timeout: float, due: bool) -> None:
        keys, names = self._wake_keys(queues)
        own = bool(names)
        end = time.monotonic() + timeout
        coarse = timeout - BLPOP_SLACK if due else max(timeout, 0.01)
        if coarse >= 0.01:
            wait = min(coarse, self._conn.socket_timeout - 1.0)
            # A popped marker ends the wait at once: the caller claims next, and claim.lua drops
            # the queue's other markers. A stale one (its job was claimed while nobody waited)
            # costs one empty claim, after which the list is empty and the next wait blocks.
            popped = self.client.blpop(keys, timeout=wait)
            if popped is not None:
                if not own:  # the global list: no claim.lua drops its markers
                    self.client.delete(popped[0])
                hit = popped[0].decode() if isinstance(popped[0], bytes) else popped[0]
                self._woken(names, [k == hit for k in keys])
                return
        while due and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, DUE_POLL))
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.lpop(key)
            got = pipe.execute()
            if any(got):
                self._woken(names, got)
                return

    # ------------------------------------------------------------------ waiting on one job
    @guarded
    def change_cursor(self, queue: str) -> Any:
        """The id of the newest entry of the queue's event stream (``0-0`` when empty)."""
        newest = self.client.xrevrange(self.keys.queue_key(queue, "events"), count=1)
        return newest[0][0] if newest else b"0-0"

    @guarded
    def wait_change(self, queue: str, job_id: str, cursor: Any, timeout: float) -> Any:
        """Block on XREAD of the queue's event stream after ``cursor`` until an entry names
        ``job_id`` (its transition) or ``timeout``; return the last entry id read.

        Every transition of a job appends to its queue's stream (one entry per script call),
        so this wakes within a round trip of the job finishing, with no polling. Entries of
        other jobs are skipped without decoding (a byte search for the id). Each XREAD blocks
        at most ``WATCH_BLOCK`` s: a stream trimmed to nothing (``events_max`` 0) costs
        latency, never a missed result (the caller re-reads the job after every return).
        """
        key, needle = self.keys.queue_key(queue, "events"), job_id.encode()
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            block = watch_block(left, self._conn.socket_timeout)
            reply = self.client.xread({key: cursor}, count=WATCH_COUNT, block=block)
            if not reply:
                return cursor
            cursor, hit = scan_entries(reply[0][1], needle)
            if hit:
                break
        return cursor

    @guarded
    def flush_all(self) -> None:
        """Delete every key of this broker's prefix (tests, demos)."""
        batch: list[Any] = []
        for key in self.client.scan_iter(match=self.keys.pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 500:
                self._unlink(batch)
                batch = []
        if batch:
            self._unlink(batch)
        self._where.clear()
        self._conn.registered.clear()
        self.gate.forget()  # <p>:format went too: a fresh deployment again

    @guarded
    def migrate_format(self, check: bool = False) -> dict[str, Any]:
        """Turn fresh ready members on (``<p>:format`` = "2", fmtgate.py) once every worker runs
        this version; ``check`` only reports. Returns ``backend``, ``key``, ``found``,
        ``version``, ``migrated`` and ``behind`` (``conveyor migrate`` prints them)."""
        return fmtgate.migrate(self, check)

    def _unlink(self, keys: list[Any]) -> None:
        if self.cluster:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.unlink(key)
            pipe.execute()
        else:
            self.client.unlink(*keys)

    def close(self) -> None:
        """Release this broker's share of the process-wide connection pool."""
        from . import conn

        if getattr(self, "_closed", False):
            return
        self._closed = True
        self._waker.close()  # a pending global wake-up goes out before the client may close
        aclients = getattr(self, "aclients", None)
        if aclients is not None:  # redis.asyncio clients of loops still open (aio.py)
            aclients.close()
        conn.release(self._conn)
