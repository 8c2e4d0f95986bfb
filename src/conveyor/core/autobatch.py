"""Auto-batching policy (pure): which single-job enqueues are written together, and when.

``AutoBatch`` is the opt-in setting (``Conveyor(url, autobatch=AutoBatch(...))``);
``FlushBuffer`` holds the enqueues waiting for one combined broker write and decides when it
is due: as soon as ``max_jobs`` are waiting, or when the oldest has waited ``max_delay``
seconds. Times come from the caller (``conveyor.autobatch`` passes its timer), so the policy is
tested with plain numbers and no thread or clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..errors import ValidationError

T = TypeVar("T")

#: The longest ``max_delay`` accepted: a buffer exists to shave round trips, not to hold
#: callers for long (each caller waits for its batch to be stored).
MAX_DELAY_LIMIT = 1.0


@dataclass(frozen=True)
class AutoBatch:
    """Opt-in auto-batching of single-job enqueues (docs/design.md#auto-batching-producer).

    Enqueues of one job from any thread or task of the process are buffered and written in
    one broker call once ``max_jobs`` are waiting or the oldest has waited ``max_delay``
    seconds (``0``, the default: no waiting — whatever arrived while the previous write ran
    goes next, so a lone caller is not slowed down and batches form under load).
    Each caller still blocks until its own job is stored and gets its own handle or error.
    """

    max_jobs: int = 100
    max_delay: float = 0.0  # group commit: a lone caller never waits (issue 18, docs/design.md)

    def __post_init__(self) -> None:
        n = self.max_jobs
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValidationError("autobatch.max_jobs", f"must be a whole number >= 1, got {n!r}")
        d = self.max_delay
        ok = isinstance(d, int | float) and not isinstance(d, bool) and math.isfinite(d)
        if not ok or not 0 <= d <= MAX_DELAY_LIMIT:
            raise ValidationError(
                "autobatch.max_delay",
                f"must be a number of seconds from 0 to {MAX_DELAY_LIMIT:g}, got {d!r}",
            )
        object.__setattr__(self, "max_delay", float(d))


class FlushBuffer(Generic[T]):
    """Items waiting for one combined write, in arrival order (one item = one job)."""

    def __init__(self, config: AutoBatch) -> None:
        self.config = config
        self.items: list[T] = []
        self._arrived: list[float] = []  # arrival time of each item (its own deadline)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: T, now: float) -> bool:
        """Append ``item``; True when the writer must look again (first item, or now full)."""
        self.items.append(item)
        self._arrived.append(now)
        size = len(self.items)
        return size == 1 or size == self.config.max_jobs

    @property
    def deadline(self) -> float:
        """When the oldest waiting item must be written (infinity when empty)."""
        return self._arrived[0] + self.config.max_delay if self._arrived else math.inf

    def due(self, now: float) -> bool:
        """True when a write should start now: ``max_jobs`` waiting, or the oldest is due."""
        if not self.items:
            return False
        return len(self.items) >= self.config.max_jobs or now >= self.deadline

    def wait_time(self, now: float) -> float | None:
        """Seconds until ``due`` turns true by time alone (None: nothing waits)."""
        return None if not self.items else max(0.0, self.deadline - now)

    def take(self) -> list[T]:
        """The next batch: the oldest ``max_jobs`` items (the rest keep their deadlines)."""
        n = self.config.max_jobs
        batch, self.items = self.items[:n], self.items[n:]
        self._arrived = self._arrived[n:]
        return batch
