"""Alert rules: each looks at the system and returns the violations it sees right now.

A rule yields one ``Violation`` per thing in trouble (usually per queue), keyed
``<rule name>:<subject>``; ``AlertManager`` turns appearing and disappearing violations into
firing / resolved transitions. Rules come from code (``QueueDepth(10)``) or config
(``rule_from_dict({"type": "queue_depth", "threshold": 10})``).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..core.job import validate_queue_name
from ..core.shards import fold_counts
from ..errors import ValidationError
from .admin import worker_queues
from .metrics import flush_local, read_counters, summarize
from .shardrows import fold_window

if TYPE_CHECKING:
    from ..runtime import Runtime

ACTIVE_STATES = ("scheduled", "pending", "active", "retry_scheduled")


@dataclass(frozen=True)
class Violation:
    """One thing a rule finds wrong: ``subject`` is the queue or schedule concerned."""

    subject: str
    message: str
    value: float


class AlertContext:
    """What rules read during one evaluation; each broker read happens at most once."""

    def __init__(self, runtime: Runtime, now: float) -> None:
        self.runtime = runtime
        self.now = now
        self._windows: dict[tuple[int, str | None], dict[str, dict[str, float]]] = {}

    @cached_property
    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs per queue and state (a sharded queue: one entry, its shards summed)."""
        folded = fold_counts(self.runtime.broker.counts(), self.runtime.shards)
        return {q: {k: v for k, v in c.items() if k != "shards"} for q, c in folded.items()}

    @cached_property
    def workers(self) -> list[dict[str, Any]]:
        """Live worker records."""
        from .admin import workers

        return workers(self.runtime)

    @cached_property
    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule, normalised (see ``inspect.schedule_dict``)."""
        from .inspect import list_schedules

        return list_schedules(self.runtime)

    def window(self, minutes: int) -> dict[str, dict[str, float]]:
        """Counters of the last ``minutes`` minutes grouped by queue."""
        key = (minutes, None)
        if key not in self._windows:
            flush_local(self.runtime)
            raw = read_counters(self.runtime.broker, self.now, minutes, by="queue")
            self._windows[key] = fold_window(raw, self.runtime.shards)
        return self._windows[key]

    def queues(self, only: str | None) -> list[str]:
        """The queue a rule names, or every known queue."""
        return [only] if only else sorted(self.counts)


@dataclass
class Rule(abc.ABC):
    """Base of every rule: a unique ``name`` (defaults to the type) and a ``severity``."""

    name: str = ""
    severity: str = "warning"
    type: str = field(default="", init=False)

    def __post_init__(self) -> None:
        if not self.name:
            self.name = self.type
        if not isinstance(self.name, str) or not self.name or len(self.name) > 100:
            raise ValidationError("name", "a rule name must be a string of 1-100 characters")

    @abc.abstractmethod
    def check(self, ctx: AlertContext) -> list[Violation]:
        """The violations present now."""

    def describe(self) -> str:
        """A one-line description for lists."""
        return self.type


@dataclass
class QueueDepth(Rule):
    """Fires when a queue holds more than ``threshold`` pending (ready) jobs."""

    threshold: int = 1000
    queue: str | None = None
    type: str = field(default="queue_depth", init=False)

    def check(self, ctx: AlertContext) -> list[Violation]:
        """Queues over the threshold."""
        out = []
        for q in ctx.queues(self.queue):
            depth = ctx.counts.get(q, {}).get("pending", 0)
            if depth > self.threshold:
                out.append(
                    Violation(
                        q, f"queue {q!r} has {depth} pending jobs (> {self.threshold})", depth
                    )
                )
        return out

    def describe(self) -> str:
        """See Rule.describe."""
        return f"pending jobs in {self.queue or 'any queue'} > {self.threshold}"


@dataclass
class OldestPendingAge(Rule):
    """Fires when the oldest pending job of a queue has waited more than ``seconds``."""

    seconds: float = 300.0
    queue: str | None = None
    type: str = field(default="oldest_pending_age", init=False)

    def check(self, ctx: AlertContext) -> list[Violation]:
        """Queues whose head job waited too long."""
        out = []
        for q in ctx.queues(self.queue):
            ready = ctx.runtime.broker.oldest_pending(q)
            age = ctx.now - ready if ready is not None else 0.0
            if age > self.seconds:
                out.append(
                    Violation(
                        q,
                        f"oldest pending job of {q!r} waited {age:.0f}s (> {self.seconds:g}s)",
                        age,
                    )
                )
        return out

    def describe(self) -> str:
        """See Rule.describe."""
        return f"oldest pending age in {self.queue or 'any queue'} > {self.seconds:g}s"


@dataclass
class FailureRate(Rule):
    """Fires when more than ``percent`` % of finished attempts failed over ``window`` minutes."""

    percent: float = 10.0
    window: int = 5
    queue: str | None = None
    min_jobs: int = 1
    type: str = field(default="failure_rate", init=False)

    def check(self, ctx: AlertContext) -> list[Violation]:
        """Queues failing too often."""
        out = []
        counters = ctx.window(self.window)
        for q in [self.queue] if self.queue else sorted(counters):
            s = summarize(counters.get(q, {}), self.window)
            if s.failure_rate is None or s.completed + s.failed < self.min_jobs:
                continue
            rate = 100.0 * s.failure_rate
            if rate > self.percent:
                out.append(
                    Violation(
                        q,
                        f"{rate:.1f}% of jobs in {q!r} failed over the last "
                        f"{self.window} min (> {self.percent:g}%)",
                        rate,
                    )
                )
        return out

    def describe(self) -> str:
        """See Rule.describe."""
        where = self.queue or "any queue"
        return f"failure rate in {where} > {self.percent:g}% over {self.window} min"


@dataclass
class DeadLetterGrowth(Rule):
    """Fires when a queue's dead letters grew by more than ``increase`` within ``window`` min.

    Samples of the dead-letter count are kept in the broker (collection ``alert_samples``), so
    every scheduler process sees the same baseline.
    """

    increase: int = 0
    window: int = 60
    queue: str | None = None
    type: str = field(default="dead_letter_growth", init=False)

    def check(self, ctx: AlertContext) -> list[Violation]:
        """Queues whose dead-letter count rose too fast."""
        broker = ctx.runtime.broker
        doc = broker.docs.get("alert_samples", self.name, ctx.now) or {}
        samples: dict[str, list[list[float]]] = doc.get("samples", {})
        cutoff = ctx.now - self.window * 60.0
        out = []
        for q in ctx.queues(self.queue):
            count = ctx.counts.get(q, {}).get("dead_letter", 0)
            known = samples.get(q, [[ctx.now, 0.0]] if doc else [])  # new queue: it held 0
            kept = [s for s in known if s[0] >= cutoff] + [[ctx.now, float(count)]]
            samples[q] = kept[-500:]
            grew = count - min(s[1] for s in kept)
            if grew > self.increase:
                out.append(
                    Violation(
                        q,
                        f"dead letters of {q!r} grew by {grew:.0f} in "
                        f"{self.window} min (> {self.increase})",
                        grew,
                    )
                )
        broker.docs.put(
            "alert_samples",
            self.name,
            {"samples": samples},
            ctx.now,
            ttl=self.window * 60.0 + 3600.0,
        )
        return out

    def describe(self) -> str:
        """See Rule.describe."""
        where = self.queue or "any queue"
        return f"dead letters in {where} grew > {self.increase} in {self.window} min"


@dataclass
class NoLiveWorker(Rule):
    """Fires when no live worker serves a queue (any queue with unfinished jobs if unset)."""

    queue: str | None = None
    type: str = field(default="no_live_worker", init=False)

    def check(self, ctx: AlertContext) -> list[Violation]:
        """Queues nobody serves."""
        served = {q for w in ctx.workers for q in worker_queues(w)}
        if self.queue:
            wanted = [self.queue]
        else:
            wanted = [
                q for q, c in sorted(ctx.counts.items()) if any(c.get(s, 0) for s in ACTIVE_STATES)
            ]
        return [
            Violation(q, f"no live worker serves queue {q!r}", 0.0)
            for q in wanted
            if q not in served
        ]

    def describe(self) -> str:
        """See Rule.describe."""
        return f"no live worker for {self.queue or 'a queue with work'}"


@dataclass
class CronMissed(Rule):
    """Fires when an active schedule's next run is more than ``grace`` seconds overdue."""

    grace: float = 120.0
    schedule: str | None = None
    type: str = field(default="cron_missed", init=False)

    def check(self, ctx: AlertContext) -> list[Violation]:
        """Schedules whose tick did not run."""
        out = []
        for s in ctx.schedules:
            if (self.schedule and s["name"] != self.schedule) or s.get("paused"):
                continue
            due = s.get("next_run")
            if isinstance(due, int | float) and ctx.now - due > self.grace:
                late = ctx.now - due
                out.append(
                    Violation(
                        str(s["name"]),
                        f"schedule {s['name']!r} did not run: its "
                        f"tick is {late:.0f}s overdue (> {self.grace:g}s)",
                        late,
                    )
                )
        return out

    def describe(self) -> str:
        """See Rule.describe."""
        return f"tick of {self.schedule or 'any schedule'} overdue > {self.grace:g}s"


RULE_TYPES: dict[str, type[Rule]] = {
    cls.type: cls
    for cls in (
        QueueDepth,
        OldestPendingAge,
        FailureRate,
        DeadLetterGrowth,
        NoLiveWorker,
        CronMissed,
    )
}
_NUMERIC = {
    "threshold": int,
    "seconds": float,
    "percent": float,
    "window": int,
    "min_jobs": int,
    "increase": int,
    "grace": float,
}


def rule_from_dict(data: Mapping[str, Any]) -> Rule:
    """Build a rule from config, e.g. ``{"type": "failure_rate", "percent": 5, "window": 10}``."""
    if not isinstance(data, Mapping):
        raise ValidationError("alerts", "each rule must be an object with a 'type'")
    kind = data.get("type")
    cls = RULE_TYPES.get(str(kind))
    if cls is None:
        raise ValidationError("alerts.type", f"{kind!r} is not one of {sorted(RULE_TYPES)}")
    allowed = {f for f in cls.__dataclass_fields__ if f != "type"}
    args: dict[str, Any] = {}
    for key, value in data.items():
        if key == "type":
            continue
        if key not in allowed:
            raise ValidationError(
                f"alerts.{key}", f"unknown option for {kind}; use {sorted(allowed)}"
            )
        if key in _NUMERIC:
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValidationError(f"alerts.{key}", f"must be a number >= 0, got {value!r}")
            value = _NUMERIC[key](value)
        elif key == "queue" and value is not None:
            value = validate_queue_name(value, "alerts.queue")
        args[key] = value
    return cls(**args)
