"""Scheduling: cron and interval schedules stored in the broker, fired exactly once per tick.

``ScheduleRegistry`` (``app.schedules``) declares and manages schedules; ``Scheduler``
(``app.scheduler()``) runs its ``Plugin``s: promotes due delayed jobs, reaps expired leases,
enqueues due ticks, evaluates alerts, and any plugin the user adds (``plugins=[...]``).
Any number of schedulers may run at once: each tick has a deterministic job id, so they never
double a run, and no leader is elected. See docs/scheduling.md.
"""

from .models import Schedule, ScheduleNotFound
from .plan import Plan, plan_fires
from .plugins import Plugin
from .runner import Scheduler
from .schedules import ScheduleRegistry

__all__ = [
    "Plan",
    "Plugin",
    "Schedule",
    "ScheduleNotFound",
    "ScheduleRegistry",
    "Scheduler",
    "plan_fires",
]
