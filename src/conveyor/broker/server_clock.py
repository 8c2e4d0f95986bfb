"""ServerClock: "now" as the broker server sees it (Redis ``TIME``), without a round trip each call.

It measures the offset between the local clock and the server's and re-measures it every
``resync`` seconds, so hosts with skewed clocks agree on leases and due times.
"""

from __future__ import annotations

import threading
import time

from .base import Broker


class ServerClock:
    """Local time corrected by the measured offset to the broker's clock."""

    def __init__(self, broker: Broker, resync: float = 30.0) -> None:
        self._broker = broker
        self._resync = resync
        self._offset = 0.0
        self._synced_at = -1e18
        self._lock = threading.Lock()

    def now(self) -> float:
        """Server time estimate; falls back to the local clock if the server is unreachable."""
        mono = time.monotonic()
        if mono - self._synced_at > self._resync:
            with self._lock:
                if mono - self._synced_at > self._resync:
                    self._sync(mono)
        return time.time() + self._offset

    def _sync(self, mono: float) -> None:
        before = time.time()
        try:
            server = self._broker.server_time()
        except Exception:
            server = None
        after = time.time()
        if server is not None:
            self._offset = server - (before + after) / 2
        self._synced_at = mono
