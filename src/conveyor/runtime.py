"""The runtime: what workers, schedulers and monitors share, below the ``Conveyor`` facade.

``Conveyor`` builds one ``Runtime`` (``app.runtime``) and every process takes it instead of the
app: the broker, the clock (``now()``), the settings, the task registry, the middleware list,
the two random sources (``rng`` for backoff jitter, ``id_rng`` for ids), the producer
(``enqueue`` / ``enqueue_many``), and two services the facade builds on first use (the schedule
registry and the alert manager), reached through callables so this module never imports the
facade, the scheduler or monitoring. ``as_runtime(x)`` accepts an app or a runtime, so the
public constructors (``Worker(app)``, ``Inspector(app)``...) keep taking an app.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from .broker.base import Broker
from .config import Settings
from .core.clock import Clock
from .core.ids import IdRandom
from .core.shards import ShardMap
from .errors import ValidationError
from .handles import JobHandle
from .middleware import Middleware
from .producer import Producer
from .task import JobSpec, Task, check_options


class Schedules(Protocol):
    """What processes use of the schedule registry (``scheduler.schedules.ScheduleRegistry``)."""

    def sync(self, now: float | None = None) -> Any:
        """Upsert the code-declared schedules."""

    def list(self) -> Any:
        """Every stored schedule."""

    def set_paused(self, name: str, paused: bool) -> Any:
        """Pause or resume a schedule."""

    def next_runs(self, name: str, n: int = 5) -> Any:
        """The next ``n`` fire times of a schedule."""

    def history(self, name: str, limit: int = 50) -> Any:
        """A schedule's recent firings."""


class Alerts(Protocol):
    """What processes use of the alert manager (``monitoring.alerts.AlertManager``)."""

    rules: list[Any]

    def states(self, include_resolved: bool = True) -> list[Any]:
        """Every stored alert state."""

    def acknowledge(self, key: str, by: str = "") -> bool:
        """Acknowledge a firing alert."""

    def maybe_evaluate(self, now: float | None = None) -> Any:
        """Evaluate the rules if the interval passed."""

    def evaluate(self, now: float | None = None) -> Any:
        """Evaluate the rules now."""


class HasRuntime(Protocol):
    """Anything that owns a runtime: the ``Conveyor`` facade."""

    @property
    def runtime(self) -> Runtime:
        """The app's runtime."""


class Runtime:
    """The services one app's processes share (see the module docstring)."""

    def __init__(
        self,
        broker: Broker,
        *,
        clock: Clock,
        settings: Settings,
        rng: random.Random | None = None,
        middleware: Iterable[Middleware] = (),
        schedules: Callable[[], Schedules] | None = None,
        alerts: Callable[[], Alerts] | None = None,
        owner: Any = None,
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.settings = settings
        self.rng = rng or random.Random()
        # Ids draw from their own source so that ``rng`` (backoff jitter) stays exact in tests.
        self.id_rng: random.Random = IdRandom()
        self.tasks: dict[str, Task[..., Any]] = {}
        self.middleware: list[Middleware] = list(middleware)
        #: what middleware hooks receive as ``app`` (the facade; the runtime when there is none)
        self.owner: Any = self if owner is None else owner
        self._schedules = schedules
        self._alerts = alerts
        #: sharded queues (``app.queue(name, shards=N)``): producers route, workers expand
        self.shards = ShardMap()
        self.producer: Producer = Producer(self)

    def now(self) -> float:
        """The current time (the injected clock)."""
        return self.clock.now()

    @property
    def schedules(self) -> Schedules:
        """The schedule registry (built by the facade on first use)."""
        if self._schedules is None:
            raise RuntimeError("this runtime has no schedule registry")
        return self._schedules()

    @property
    def alerts(self) -> Alerts | None:
        """The alert manager (built by the facade on first use), or None without one."""
        return None if self._alerts is None else self._alerts()

    def enqueue(
        self,
        task: str | Task[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        bind: bool = False,
        known_only: bool = False,
        **options: Any,
    ) -> JobHandle[Any]:
        """Enqueue by task name (the task need not be registered in this process, unless
        ``known_only`` and this app registers tasks); ``bind``: check the arguments of a
        registered task (``Producer.enqueue_many``)."""
        name = _enqueue_name(task, args, kwargs)
        flags = {"bind": bind, "known_only": known_only}
        if not options:
            return self.producer.enqueue_one(name, args, kwargs, **flags)
        connection = options.pop("connection", None)  # docs/transactions.md
        spec = JobSpec(name, tuple(args or ()), dict(kwargs or {}), check_options(options))
        return self.producer.enqueue_many((spec,), connection, **flags)[0]

    async def enqueue_async(
        self,
        task: str | Task[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        bind: bool = False,
        known_only: bool = False,
        **options: Any,
    ) -> JobHandle[Any]:
        """``enqueue`` without blocking the event loop."""
        name = _enqueue_name(task, args, kwargs)
        spec = JobSpec(name, tuple(args or ()), dict(kwargs or {}), check_options(options))
        flags = {"bind": bind, "known_only": known_only}
        handles = await self.producer.enqueue_many_async((spec,), **flags)
        return handles[0]

    def enqueue_many(
        self,
        specs: Iterable[JobSpec],
        connection: Any = None,
        *,
        bind: bool = False,
        known_only: bool = False,
    ) -> list[JobHandle[Any]]:
        """Store every job or none (atomic), returning their handles in order.

        ``connection``: inside that database transaction (docs/transactions.md).
        """
        return self.producer.enqueue_many(specs, connection, bind=bind, known_only=known_only)

    async def enqueue_many_async(
        self, specs: Iterable[JobSpec], *, bind: bool = False, known_only: bool = False
    ) -> list[JobHandle[Any]]:
        """``enqueue_many`` without blocking the event loop."""
        return await self.producer.enqueue_many_async(specs, bind=bind, known_only=known_only)


def _enqueue_name(task: str | Task[..., Any], args: object, kwargs: object) -> str:
    """The task name of an enqueue by name, after checking ``args`` and ``kwargs``' types."""
    if args is not None and not isinstance(args, list | tuple):
        raise ValidationError("args", f"must be a list, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ValidationError("kwargs", f"must be a dict, got {type(kwargs).__name__}")
    return task.name if isinstance(task, Task) else task


def as_runtime(source: Runtime | HasRuntime) -> Runtime:
    """The runtime of an app, or the runtime itself (public constructors accept either)."""
    if isinstance(source, Runtime):
        return source
    runtime = getattr(source, "runtime", None)
    if not isinstance(runtime, Runtime):
        raise TypeError(f"expected a Conveyor app or a Runtime, got {type(source).__name__}")
    return runtime
