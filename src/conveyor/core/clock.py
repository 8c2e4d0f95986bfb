"""Clocks: the one source of "now" for every component (SystemClock, FakeClock)."""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now()`` returning seconds since the epoch as a float."""

    def now(self) -> float:
        """Return the current time in seconds since the epoch."""
        ...


class SystemClock:
    """The host's wall clock (``time.time``)."""

    def now(self) -> float:
        """Return ``time.time()``."""
        return time.time()


class FakeClock:
    """A clock that only moves when told to: for deterministic tests and simulations."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """Return the fake current time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (never backwards) and return the new time."""
        if seconds < 0:
            raise ValueError("FakeClock.advance: seconds must be >= 0")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, t: float) -> None:
        """Jump to absolute time ``t``."""
        with self._lock:
            self._now = float(t)
