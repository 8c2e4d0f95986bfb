"""Broker outages in the log: one line when the connection is lost, one when it is back.

A worker or scheduler retries every broker call while Redis (or a locked SQLite file) is
unreachable, which used to log a full traceback about once a second per thread. Instead, the
loops report each failure to the ``OutageLog`` of their broker (one per broker object, shared
by every loop of the process), which writes:

* on the first connection error: one WARNING line with the error (no traceback);
* while it lasts: a WARNING reminder with the retry count every ``REMIND_EVERY`` seconds;
* on the first success afterwards: one WARNING line "reconnected after N retries, X s".

Other errors are not outages: ``failed`` returns False and the caller logs them as before.

A periodic duty (the scheduler's plugins, a worker's lease reaping) that fails is retried
sooner than its period: ``retry_delay`` is a capped exponential backoff with jitter drawn from
the caller's (injectable) random source.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Callable

from .errors import BrokerUnavailable

REMIND_EVERY = 60.0  # seconds between "still unreachable" lines during one outage
RETRY_FIRST = 0.5  # seconds: the first retry of a failed periodic pass comes within this
_SHARED: weakref.WeakKeyDictionary[object, OutageLog] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def is_connection_error(exc: BaseException) -> bool:
    """True for a lost or refused connection (retrying later helps), not for a bug or a
    refusal the broker will repeat."""
    return isinstance(exc, BrokerUnavailable | ConnectionError | TimeoutError)


def retry_delay(failures: int, cap: float, rng: random.Random) -> float:
    """Seconds before retrying a periodic duty after its ``failures``-th failure in a row:
    ``RETRY_FIRST`` doubled per failure, at most ``cap`` (its own period: a retry never comes
    later than the next regular pass would), with "equal jitter" (half of it drawn from
    ``rng``) so that the processes of a fleet do not all retry in step after an outage."""
    ceiling = min(cap, RETRY_FIRST * 2.0 ** min(max(failures, 1) - 1, 32))
    return ceiling * (0.5 + 0.5 * rng.random())


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"


class OutageLog:
    """The outage state of one broker connection, reported by every loop that uses it."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, remind_every: float = REMIND_EVERY
    ) -> None:
        self._clock = clock
        self.remind_every = remind_every
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.retries = 0
        self._reminded = 0.0

    @classmethod
    def shared(cls, broker: object) -> OutageLog:
        """The process-wide instance for ``broker`` (a fresh one if it cannot be keyed)."""
        with _SHARED_LOCK:
            try:
                found = _SHARED.get(broker)
                if found is None:
                    found = _SHARED[broker] = cls()
                return found
            except TypeError:  # not weak-referenceable: unshared, still quiet per loop
                return cls()

    @property
    def down(self) -> bool:
        """True between a connection loss and the next success."""
        return self.down_since is not None

    def failed(self, exc: BaseException, doing: str, log: logging.Logger) -> bool:
        """Record a failed broker call; False when ``exc`` is not a connection error (log it
        yourself), True when it was handled here."""
        if not is_connection_error(exc):
            return False
        now = self._clock()
        with self._lock:
            if self.down_since is None:
                self.down_since, self.retries, self._reminded = now, 0, now
                log.warning(
                    "lost the connection to the broker (%s): %s; retrying quietly",
                    doing,
                    _one_line(exc),
                )
                return True
            self.retries += 1
            if now - self._reminded < self.remind_every:
                return True
            self._reminded = now
            retries, since = self.retries, self.down_since
        log.warning(
            "broker still unreachable after %d retries (%.0f s): %s",
            retries,
            now - since,
            _one_line(exc),
        )
        return True

    def succeeded(self, log: logging.Logger) -> None:
        """Record a broker call that worked; logs the recovery after an outage."""
        if self.down_since is None:  # the common case: no lock, no work
            return
        with self._lock:
            if self.down_since is None:
                return
            took, retries = self._clock() - self.down_since, self.retries
            self.down_since, self.retries = None, 0
        log.warning("reconnected to the broker after %d retries, %.1f s", retries, took)
