"""The lease keeper: one thread that extends ALL in-flight leases in one broker call.

It runs every ``visibility_timeout / 3`` seconds, so a lease survives two failed rounds before it
expires. Job code cannot block it (it is its own thread and never runs job code). When the broker
answers False for a lease, the job was redelivered or finished elsewhere: the attempt is marked
lost, which makes the worker discard its outcome, log it and emit ``on_lease_lost``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..broker.base import Broker
from ..outage import OutageLog
from .running import Running

log = logging.getLogger("conveyor.worker")


class LeaseKeeper:
    """Extends the leases returned by ``snapshot()`` every ``interval`` seconds."""

    def __init__(
        self,
        broker: Broker,
        now: Callable[[], float],
        snapshot: Callable[[], list[Running]],
        visibility_timeout: float,
        on_lost: Callable[[Running], None],
        interval: float | None = None,
    ) -> None:
        self.broker = broker
        self._now = now
        self._snapshot = snapshot
        self.visibility_timeout = visibility_timeout
        self.interval = interval if interval is not None else visibility_timeout / 3.0
        self._on_lost = on_lost
        self._failures = 0  # extend calls that failed in a row
        self._logged = False  # a failure of this run that is not an outage was logged
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name="conveyor-lease-keeper", daemon=True
        )
        self.rounds = 0

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (returns at once if it is mid-call)."""
        self._stop.set()
        self._thread.join(1.0)

    def _main(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            wait = self.interval if self.extend_once() else min(self.interval, 1.0)

    def extend_once(self) -> bool:
        """Extend every in-flight lease now; False if the broker call failed."""
        runs = [r for r in self._snapshot() if not r.lost]
        if not runs:
            return True
        asked = time.monotonic()
        try:
            results = self.broker.extend(
                [(r.job.id, r.token) for r in runs], self._now(), self.visibility_timeout
            )
        except Exception as exc:
            self._failures += 1
            if OutageLog.shared(self.broker).failed(exc, "lease keeper", log):
                return False  # an outage: OutageLog's lines (one now, one when it is back)
            if not self._logged:  # one traceback per run of failures, not one a second
                self._logged = True
                log.warning("lease keeper: extend failed; retrying every second", exc_info=True)
            return False
        OutageLog.shared(self.broker).succeeded(log)
        if self._logged:
            log.info("lease keeper: extending works again after %d failure(s)", self._failures)
        self._failures, self._logged = 0, False
        self.rounds += 1
        until = asked + self.visibility_timeout
        for run, ok in zip(runs, results, strict=True):
            if ok:
                run.lease_until = until
            # A settled attempt is being recorded: the recorder sees the broker's answer itself.
            elif not run.settled:
                self._on_lost(run)
        return True
