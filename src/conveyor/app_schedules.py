"""The facade's schedules and alerts: ``app.cron``, ``app.every``, ``app.schedule_cron``...

A mixin of ``Conveyor`` (``app.py``), split out to keep the facade under ~400 lines. The
schedule registry and the alert manager are built on first use (``self._schedules``,
``self._alerts``, set to None by ``Conveyor.__init__``); the runtime reaches them through
callables it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .monitoring.alerts import AlertManager
    from .runtime import Runtime
    from .scheduler.schedules import ScheduleRegistry
    from .task import Task

F = TypeVar("F", bound=Callable[..., Any])


class SchedulesMixin:
    """Declare and manage cron / interval schedules; reach the alert manager."""

    runtime: Runtime
    _schedules: ScheduleRegistry | None
    _alerts: AlertManager | None
    task: Callable[..., Any]  # ``Conveyor.task``: registers a decorated function

    @property
    def schedules(self) -> ScheduleRegistry:
        """The schedule registry (code-declared and stored schedules)."""
        if self._schedules is None:
            from .scheduler.schedules import ScheduleRegistry

            self._schedules = ScheduleRegistry(self.runtime, self.task)
        return self._schedules

    @property
    def alerts(self) -> AlertManager:
        """The alert manager (rules, states, notifiers); built on first use."""
        if self._alerts is None:
            from .monitoring.alerts import build_manager

            self._alerts = build_manager(self.runtime)
        return self._alerts

    def cron(self, expr: str, **options: Any) -> Callable[[F], F]:
        """Decorate a task function to run on a cron expression (``tz=``, ``name=``, ...)."""
        return self.schedules.cron(expr, **options)

    def every(self, seconds: Any, **options: Any) -> Callable[[F], F]:
        """Decorate a task function to run every ``seconds`` (int or timedelta)."""
        return self.schedules.every(seconds, **options)

    def schedule_cron(
        self, name: str, task: str | Task[..., Any], expr: str | None = None, **options: Any
    ) -> Any:
        """Create or replace a stored schedule at run time."""
        return self.schedules.schedule(name, task, expr, **options)

    def unschedule(self, name: str) -> bool:
        """Remove a schedule."""
        return self.schedules.remove(name)

    def list_schedules(self) -> list[Any]:
        """Every stored schedule."""
        return self.schedules.list()

    def pause_schedule(self, name: str) -> None:
        """Stop a schedule from firing until resumed."""
        self.schedules.set_paused(name, True)

    def resume_schedule(self, name: str) -> None:
        """Resume a paused schedule."""
        self.schedules.set_paused(name, False)
