"""When the claim loop may claim: slot accounting, claim batching and the idle back-off.

``Slots`` counts the worker's busy slots (jobs handed to an executor and not finished) and its
in-flight attempts (claimed and not yet recorded). The claim loop claims in batches: it waits
until a quarter of the slots are free (``threshold``), or nothing is running, or a free slot has
waited ``linger`` seconds — so a burst of short jobs is claimed in a few large Lua calls instead
of one per finished job, while a lone freed slot of a worker running long jobs is refilled
within milliseconds. Threads that free slots wake the claim loop only when it is waiting and
one of those conditions just became true (not once per job).

``IdleBackoff`` decides whether the claim loop must sleep after waiting for work: a wait that
returned at once and was followed by an empty claim means the backend cannot block (or the
wake-up was stale); only repeated ones back off, so a real wake-up is claimed at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .running import Running

MIN_BATCH = 32  # claim batches are at most max(threshold, MIN_BATCH) jobs
LINGER = 0.002  # seconds a free slot may wait for company before it is claimed alone
WAIT_CAP = 0.5  # the claim loop re-checks at least this often (stop flags, max_jobs)


class Slots:
    """Busy slots and in-flight attempts of one worker (thread-safe)."""

    def __init__(
        self,
        concurrency: int,
        *,
        linger: float = LINGER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.concurrency = concurrency
        self.threshold = max(1, concurrency // 4)
        self.batch = max(self.threshold, MIN_BATCH)
        self.linger = linger
        self._clock = clock
        self._lock = threading.Lock()  # hot paths take it directly; the Condition shares it
        self.cv = threading.Condition(self._lock)
        self.inflight: dict[str, Running] = {}  # claimed and not yet recorded, by token
        self.busy = 0  # of those, still executing: the slots in use
        self._free_since: float | None = None  # when the oldest free, unclaimed slot freed
        self._waiting = False  # the claim loop sleeps in wait_claimable()

    # ------------------------------------------------------------------ lock held
    def _full(self) -> bool:
        # A slot frees when its job finishes; the ack is written meanwhile. Finished but not
        # yet recorded jobs are capped too, so a slow broker slows claiming down.
        return self.busy >= self.concurrency or len(self.inflight) >= 2 * self.concurrency

    def _claimable(self, now: float) -> bool:
        if self._full():
            return False
        if self.busy == 0 or self.concurrency - self.busy >= self.threshold:
            return True
        since = self._free_since
        return since is not None and now - since >= self.linger

    # ------------------------------------------------------------------ claim loop side
    def wait_claimable(self, stopping: threading.Event) -> int:
        """Block until a claim is worth making (or ``stopping``); return how many to claim.

        That is the free slot count, at most ``batch``: a claim's round trip grows with its
        size, so many free slots are filled by several claims in a row, and the first jobs
        start while the next claim is on its way (instead of all waiting for one big claim).
        """
        with self.cv:
            while not stopping.is_set():
                now = self._clock()
                if self._claimable(now):
                    break
                if self._free_since is None and not self._full():
                    self._free_since = now  # free slots are waiting: start their linger
                wait = WAIT_CAP
                if self._free_since is not None and not self._full():
                    wait = max(0.0, self._free_since + self.linger - now)
                self._waiting = True
                try:
                    self.cv.wait(wait)
                finally:
                    self._waiting = False
            self._free_since = None
            return min(self.concurrency - self.busy, self.batch)

    def claimed(self, runs: list[Running], busy: int) -> None:
        """Register claimed attempts; ``busy`` of them occupy a slot (the rest were refused)."""
        with self._lock:
            inflight = self.inflight
            for run in runs:
                inflight[run.token] = run
            self.busy += busy

    def wake(self) -> None:
        """Wake the claim loop (stop requests)."""
        with self.cv:
            self.cv.notify_all()

    # ------------------------------------------------------------------ executor side
    def freed(self, n: int = 1) -> None:
        """``n`` jobs finished executing: their slots are free."""
        with self._lock:
            self.busy -= n
            if self._free_since is None:
                self._free_since = self._clock()
            if self._waiting:
                free = self.concurrency - self.busy
                if self.busy == 0 or free - n < self.threshold <= free or free == n:
                    self.cv.notify_all()  # became claimable, or the linger timer must start

    def recorded(self, runs: list[Running]) -> None:
        """These attempts' outcomes were written: they are no longer in flight."""
        with self._lock:
            was_capped = len(self.inflight) >= 2 * self.concurrency
            inflight = self.inflight
            for run in runs:
                inflight.pop(run.token, None)
            if not inflight or (self._waiting and was_capped):
                self.cv.notify_all()  # the claim loop may claim again; a drain may be over

    def drop(self, run: Running) -> None:
        """Forget one attempt (released at shutdown)."""
        with self.cv:
            self.inflight.pop(run.token, None)
            self.cv.notify_all()

    def wait_empty(self, deadline: float, hard: threading.Event) -> None:
        """Wait until nothing is in flight, ``hard`` is set, or monotonic ``deadline`` passes."""
        with self.cv:
            while self.inflight and not hard.is_set() and time.monotonic() < deadline:
                self.cv.wait(min(0.1, max(0.0, deadline - time.monotonic())))

    def snapshot(self) -> list[Running]:
        """The in-flight attempts."""
        with self.cv:
            return list(self.inflight.values())


class IdleBackoff:
    """After an idle wait: sleep only when fast, empty wake-ups repeat (see module docstring)."""

    FAST = 0.005  # a wait shorter than this did not block
    TOLERATED = 2  # fast empty wake-ups in a row before backing off

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self._fast_empty = 0

    def claimed(self) -> None:
        """A claim returned jobs: the wake-ups were real."""
        self._fast_empty = 0

    def delay_after_wait(self, waited: float) -> float:
        """Seconds to sleep after an empty claim and a wait for work that took ``waited`` s."""
        if waited >= self.FAST:
            self._fast_empty = 0
            return 0.0
        self._fast_empty += 1
        if self._fast_empty <= self.TOLERATED:
            return 0.0
        return min(self.poll_interval, 0.05)
