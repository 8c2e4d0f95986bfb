"""Helpers shared by the scheduler tests: drive schedulers over fake time, read the results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from conveyor import Conveyor, FakeClock, Job
from conveyor.scheduler import Scheduler


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0, tz: str = "UTC") -> float:
    """Epoch seconds of a wall-clock time in ``tz``."""
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz)).timestamp()


def local(t: float, tz: str) -> datetime:
    """The wall-clock time of ``t`` in ``tz``."""
    return datetime.fromtimestamp(t, ZoneInfo(tz))


def utc(t: float) -> datetime:
    """``t`` as an aware UTC datetime."""
    return datetime.fromtimestamp(t, UTC)


def drive(
    clock: FakeClock, schedulers: Sequence[Scheduler], until: float, step: float = 30.0
) -> int:
    """Advance ``clock`` by ``step`` up to ``until``, ticking every scheduler each step."""
    total = 0
    while clock.now() < until:
        clock.set(min(until, clock.now() + step))
        for scheduler in schedulers:
            total += scheduler.tick()
    return total


def drive_due(app: Conveyor, clock: FakeClock, scheduler: Scheduler, until: float) -> int:
    """Jump from one due tick to the next (as a sleeping scheduler would) up to ``until``."""
    total = scheduler.tick()
    for _ in range(100_000):
        due = [s.next_fire_at for s in app.list_schedules() if not s.paused and s.next_fire_at]
        if not due or min(due) > until:
            return total
        clock.set(max(min(due), clock.now()))
        total += scheduler.tick()
    raise AssertionError("drive_due: schedules never advanced")


def jobs(app: Conveyor, task: str | None = None) -> list[Job]:
    """Every stored job (of ``task``), oldest first."""
    out: list[Job] = []
    page = 1
    while True:
        result = app.search(task=task, page=page, page_size=1000)
        out.extend(result.items)
        if page >= result.pages:
            break
        page += 1
    return sorted(out, key=lambda j: (j.created_at, j.id))


def fire_times(app: Conveyor, task: str | None = None) -> list[float]:
    """The ``fire_at`` of every scheduled job, ascending."""
    return sorted(float(j.metadata["fire_at"]) for j in jobs(app, task) if "fire_at" in j.metadata)


def per_fire(app: Conveyor, task: str | None = None) -> Counter[float]:
    """How many jobs exist for each fire time."""
    return Counter(fire_times(app, task))


def outcomes(app: Conveyor, name: str) -> list[str]:
    """History outcomes of a schedule, oldest first."""
    return [e["outcome"] for e in reversed(app.schedules.history(name, 1000))]
