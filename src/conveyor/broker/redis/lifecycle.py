"""Lifecycle part of the Redis broker: server clock, idle waiting, flush, close."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ...errors import BrokerUnavailable
from .plumbing import RedisBase, guarded

log = logging.getLogger("conveyor.redis")


class LifecycleMixin(RedisBase):
    """``server_time``, ``wait_for_work``, ``flush_all`` and ``close`` of ``RedisBroker``."""

    @guarded
    def server_time(self) -> float | None:
        """Redis ``TIME`` in epoch seconds."""
        seconds, micros = self.client.time()
        return int(seconds) + int(micros) / 1_000_000

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """Block on BLPOP of the queues' wake lists until a job may be ready or ``timeout``.

        Returns as soon as a marker is popped, without checking that its job is still ready
        (that would cost a round trip on every pickup): the caller's claim decides.

        While Redis is unreachable this sleeps for ``timeout`` instead of raising: waiting is
        all it promises, and the caller's next claim reports the outage (and backs off).
        """
        if timeout <= 0 or not queues:
            return
        began = time.monotonic()
        try:
            self._block(queues, timeout)
        except BrokerUnavailable:
            log.debug("wait_for_work: Redis unavailable", exc_info=True)
            time.sleep(max(0.0, timeout - (time.monotonic() - began)))

    @guarded
    def _block(self, queues: Sequence[str], timeout: float) -> None:
        wait = max(0.01, min(timeout, self._conn.socket_timeout - 1.0))
        if not self.cluster:
            names = list(queues)
        elif len(queues) == 1:
            names = [queues[0]]
        else:
            names = []
        keys = [self.keys.queue_key(q, "wake") for q in names] or [self.keys.global_wake]
        # A popped marker ends the wait at once: the caller claims next, and claim.lua drops the
        # queue's other markers. A stale one (its job was claimed while nobody waited) costs one
        # empty claim, after which the list is empty and the next wait blocks.
        popped = self.client.blpop(keys, timeout=wait)
        if popped is not None and not names:  # the global list: no claim.lua drops its markers
            self.client.delete(popped[0])

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
        conn.release(self._conn)
