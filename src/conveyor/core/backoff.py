"""Backoff strategies: how long to wait before the next attempt. Exact under a seeded rng.

``delay(n)`` is the wait after the n-th failed attempt (n >= 1):

* ``fixed``: ``base``;
* ``exponential``: ``min(max, base * factor ** (n - 1))``;
* ``decorrelated`` (AWS "decorrelated jitter"): ``min(max, uniform(base, previous * 3))``, where
  ``previous`` is the delay this job waited before its last attempt (``base`` for the first
  retry). The caller passes it (``core.retry.previous_delay`` reads it from the job's error
  history), so every delay grows from the job's own previous one and a seeded rng gives exact
  values. ``failures`` does not matter to this strategy.

Then jitter: the delay is multiplied by ``uniform(1 - jitter, 1 + jitter)`` (default ±10 %)
and clamped to ``[0, max]``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from ..errors import ValidationError

Strategy = Literal["fixed", "exponential", "decorrelated"]


@dataclass(frozen=True)
class Backoff:
    """A retry delay policy; build with ``Backoff.exponential(...)`` and friends."""

    strategy: Strategy = "exponential"
    base: float = 1.0
    factor: float = 2.0
    max: float = 3600.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.strategy not in ("fixed", "exponential", "decorrelated"):
            raise ValidationError("backoff.strategy", "must be fixed, exponential or decorrelated")
        for name in ("base", "factor", "max", "jitter"):  # NaN or infinity: no usable delay
            _finite(getattr(self, name), f"backoff.{name}")
        if self.base < 0 or self.max < 0:
            raise ValidationError("backoff.base", "base and max must be >= 0")
        if self.factor < 1:
            raise ValidationError("backoff.factor", "must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValidationError("backoff.jitter", "must be between 0 and 1")

    @classmethod
    def fixed(cls, delay: float = 1.0, jitter: float = 0.0) -> Backoff:
        """Always wait ``delay`` seconds (± jitter)."""
        delay = _finite(delay, "backoff.base")
        return cls("fixed", base=delay, factor=1.0, max=max(delay, 0.0), jitter=jitter)

    @classmethod
    def exponential(
        cls, base: float = 1.0, factor: float = 2.0, max: float = 3600.0, jitter: float = 0.1
    ) -> Backoff:
        """Wait ``base * factor ** (n - 1)`` seconds, capped at ``max``, ± jitter."""
        return cls("exponential", base=base, factor=factor, max=max, jitter=jitter)

    @classmethod
    def decorrelated(cls, base: float = 1.0, max: float = 3600.0) -> Backoff:
        """AWS decorrelated jitter: ``min(max, uniform(base, previous * 3))``."""
        return cls("decorrelated", base=base, factor=3.0, max=max, jitter=0.0)

    def raw_delay(self, failures: int, rng: random.Random, previous: float | None = None) -> float:
        """The delay before jitter after ``failures`` failed attempts (>= 1).

        ``previous``: the job's previous delay (decorrelated only; None means ``base``).
        """
        n = max(1, failures)
        if self.strategy == "fixed":
            return self.base
        if self.strategy == "exponential":
            try:
                return min(self.max, self.base * self.factor ** (n - 1))
            except OverflowError:  # factor ** n past float range: the cap applies anyway
                return self.max
        prev = self.base if previous is None or not previous > 0 else min(previous, self.max)
        return min(self.max, rng.uniform(self.base, max(self.base, prev * self.factor)))

    def delay(self, failures: int, rng: random.Random, previous: float | None = None) -> float:
        """The jittered delay (seconds) after ``failures`` failed attempts.

        ``previous`` is the delay before the job's last attempt; only ``decorrelated`` uses it.
        """
        raw = self.raw_delay(failures, rng, previous)
        if self.jitter:
            raw *= rng.uniform(1 - self.jitter, 1 + self.jitter)
        return max(0.0, min(self.max, raw)) if self.strategy != "fixed" else max(0.0, raw)


def _finite(value: object, field_name: str) -> float:
    """``value`` if it is a finite real number (not a bool), else a ``ValidationError``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not -float("inf") < value < float("inf")
    ):
        raise ValidationError(field_name, f"must be a finite number, got {value!r}")
    return float(value)


DEFAULT_BACKOFF = Backoff.exponential()
