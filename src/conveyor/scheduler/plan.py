"""Which ticks of a schedule one scheduler pass fires: the misfire policy, pure (no I/O).

``plan_fires(schedule, now)`` is a function of the stored schedule and the time only; the
scheduler (runner.py) enqueues what it returns and records the skipped ticks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core.cron import IntervalSpec, Spec
from .models import Schedule

_PASS_LIMIT = 1000  # most ticks of one schedule handled in one pass; the rest next pass
_COUNT_LIMIT = 1000  # most missed cron ticks counted for the history (a lower bound)
_EPSILON = 0.001  # fire times are whole seconds; this steps just before one


@dataclass(frozen=True)
class Plan:
    """What one pass does for a schedule: ticks to enqueue, ticks skipped as misfires, next."""

    fires: list[float]
    next_fire_at: float
    missed: int = 0  # late ticks skipped by the misfire policy
    missed_first: float | None = None
    missed_last: float | None = None
    missed_exact: bool = True  # False: ``missed`` is a lower bound (a very long cron outage)


def plan_fires(schedule: Schedule, now: float, slack: float = 0.0) -> Plan | None:
    """Due ticks of ``schedule`` at ``now`` (None if nothing is due), after the misfire policy.

    The schedule *misfired* (its scheduler was down) when its oldest due tick is more than
    ``misfire_grace`` seconds before ``now``, not counting ``slack``: how late a running
    scheduler may see a tick (its pass interval; else ``misfire_grace=0`` with ``skip`` would
    never run). Then the policy governs EVERY due tick, also those
    that fell inside the grace period (else an outage would still end in a burst of one run per
    tick of the last ``misfire_grace`` seconds): ``skip`` runs none, ``run_once`` only the
    latest, ``backfill`` the latest ``max_backfill``; the cadence resumes from ``now``. Without a
    misfire (a short hiccup) every due tick runs.
    """
    spec = schedule.spec
    first = schedule.next_fire_at
    if first is None:
        return Plan([], spec.next_after(now))
    if first > now:
        return None
    missed, exact = 0, True
    missed_first = missed_last = None
    if first > now - schedule.misfire_grace - slack:
        fires = [first, *spec.fires_between(first, now, _PASS_LIMIT - 1)]
    else:
        keep = {"skip": 0, "run_once": 1}.get(schedule.misfire, schedule.max_backfill)
        fires = _latest_fires(spec.previous_at_or_before, first, now, keep)
        # the ticks older than the kept ones are skipped: count them (cron: up to a limit)
        before = spec.previous_at_or_before(fires[0] - _EPSILON if fires else now)
        if before is not None and before >= first:
            counted = _count_fires(spec, first, before)
            exact = isinstance(spec, IntervalSpec) or counted < _COUNT_LIMIT
            missed, missed_first, missed_last = counted, first, before
        if len(fires) > _PASS_LIMIT:  # a long backfill: the rest over the next passes
            fires = fires[:_PASS_LIMIT]
            return Plan(fires, spec.next_after(fires[-1]), missed, missed_first, missed_last, exact)
        return Plan(fires, spec.next_after(now), missed, missed_first, missed_last, exact)
    if len(fires) >= _PASS_LIMIT:  # an enormous burst: finish it over the next passes
        fires = fires[:_PASS_LIMIT]
        return Plan(fires, spec.next_after(fires[-1]), missed, missed_first, missed_last, exact)
    return Plan(fires, spec.next_after(now), missed, missed_first, missed_last, exact)


def _count_fires(spec: Spec, first: float, end: float) -> int:
    """How many fire times lie in ``[first, end]`` (``first`` is one); cron counts stop at
    ``_COUNT_LIMIT`` so a long outage of a frequent schedule stays cheap."""
    if isinstance(spec, IntervalSpec):
        return int((end - first) // spec.seconds) + 1
    return 1 + len(spec.fires_between(first, end, _COUNT_LIMIT - 1))


def _latest_fires(
    previous: Callable[[float], float | None], first: float, end: float, keep: int
) -> list[float]:
    """The latest ``keep`` fire times in ``[first, end]``, ascending."""
    out: list[float] = []
    t = previous(end)
    while t is not None and t >= first and len(out) < keep:
        out.append(t)
        t = previous(t - _EPSILON)
    out.reverse()
    return out
