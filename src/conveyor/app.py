"""Conveyor: the application object — task registry, enqueue API, admin API, factories.

``Conveyor(url)`` picks a broker from the URL (``memory://``, ``sqlite:///file.db``,
``redis://…``; default ``CONVEYOR_URL`` or ``sqlite:///conveyor.db``) and builds the app's
``Runtime`` (``app.runtime``: broker, clock, settings, tasks, middleware, random sources,
producer). It is the one user-facing facade: workers, schedulers, inspectors and operator
actions take the runtime, never this object, and its admin methods delegate to
``monitoring/admin.py``.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast, overload

from .app_admin import AdminMixin
from .app_flow import FlowControlMixin
from .app_schedules import SchedulesMixin
from .app_workflow import WorkflowMixin
from .autobatch import from_option
from .broker.base import Broker
from .broker.factory import broker_from_url
from .config import DEFAULT_URL, Settings
from .core.autobatch import AutoBatch
from .core.backoff import Backoff
from .core.clock import Clock, SystemClock
from .core.flow import ConcurrencyLimit, RateLimit, task_flow
from .core.job import MAX_DELAY, Job, too_long
from .errors import ValidationError
from .handles import Delivery, JobHandle
from .middleware import Middleware
from .monitoring.metrics import MetricsMiddleware
from .runtime import Runtime
from .task import ExecutorKind, JobSpec, Task, TaskDecorator, build_task

if TYPE_CHECKING:
    from .monitoring.alerts import AlertManager
    from .scheduler.runner import Scheduler
    from .scheduler.schedules import ScheduleRegistry
    from .worker.loop import Worker

log = logging.getLogger("conveyor")
F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
_default_url_logged = False


def default_middleware() -> list[Middleware]:
    """The middleware every app installs unless ``Conveyor(middleware=...)`` says otherwise:
    today ``[MetricsMiddleware()]`` (fresh instances on each call). Keep them with
    ``middleware=[*default_middleware(), Mine()]``; leave them out to run without metrics."""
    return [MetricsMiddleware()]


class Conveyor(AdminMixin, FlowControlMixin, WorkflowMixin, SchedulesMixin):
    """A job processing application bound to one broker.

    Its methods by duty: tasks, enqueue and consumers here; inspection and operator actions in
    ``app_admin.py``, flow control in ``app_flow.py``, workflows and batches in
    ``app_workflow.py``, schedules and alerts in ``app_schedules.py`` (mixins).
    """

    def __init__(
        self,
        url: str | Broker | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        settings: Settings | None = None,
        middleware: Iterable[Middleware] | None = None,
        strict_names: bool = True,
        autobatch: AutoBatch | bool | None = None,
    ) -> None:
        """``autobatch``: buffer single-job enqueues of all threads and tasks and store them
        in one broker call (``AutoBatch(max_jobs=, max_delay=)``, True for the defaults, False
        for off; None: the ``CONVEYOR_AUTOBATCH_*`` settings decide; docs/design.md)."""
        #: refuse ``enqueue`` by a task name this app does not register (when it registers
        #: any); False for producers that enqueue other services' tasks by name
        self.strict_names = strict_names
        settings = settings or Settings.from_env()
        if isinstance(url, Broker):
            broker = url
        else:
            broker = broker_from_url(_resolve_url(url, settings), settings.retention)
        # the given list replaces the defaults (None: ``default_middleware()``)
        mws = default_middleware() if middleware is None else list(middleware)
        self._schedules: ScheduleRegistry | None = None
        self._alerts: AlertManager | None = None
        #: the services every process shares (see ``conveyor/runtime.py``)
        self.runtime = Runtime(
            broker,
            clock=clock or _default_clock(broker),
            settings=settings,
            rng=rng,
            middleware=mws,
            schedules=lambda: self.schedules,
            alerts=lambda: self.alerts,
            owner=self,
        )
        self._last_reap = float("-inf")
        self._members: dict[str, tuple[float, list[str]]] = {}  # ``pull_members``' cache
        if autobatch is not None:
            self.runtime.producer.autobatch = from_option(self.runtime, autobatch)

    # the runtime's parts, as attributes of the app (public API)
    @property
    def broker(self) -> Broker:
        """The app's broker."""
        return self.runtime.broker

    @broker.setter
    def broker(self, value: Broker) -> None:
        self.runtime.broker = value

    @property
    def clock(self) -> Clock:
        """The app's clock."""
        return self.runtime.clock

    @clock.setter
    def clock(self, value: Clock) -> None:
        self.runtime.clock = value

    @property
    def settings(self) -> Settings:
        """The app's settings."""
        return self.runtime.settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        self.runtime.settings = value

    @property
    def rng(self) -> random.Random:
        """The random source of backoff jitter."""
        return self.runtime.rng

    @rng.setter
    def rng(self, value: random.Random) -> None:
        self.runtime.rng = value

    @property
    def id_rng(self) -> random.Random:
        """The random source of job and worker ids."""
        return self.runtime.id_rng

    @id_rng.setter
    def id_rng(self, value: random.Random) -> None:
        self.runtime.id_rng = value

    @property
    def tasks(self) -> dict[str, Task[..., Any]]:
        """Registered tasks by name."""
        return self.runtime.tasks

    @property
    def middleware(self) -> list[Middleware]:
        """The middleware list (hooks run in this order)."""
        return self.runtime.middleware

    def now(self) -> float:
        """The app's current time (the injected clock)."""
        return self.runtime.clock.now()

    # ------------------------------------------------------------------ tasks
    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        timeout: float | None = None,
        max_attempts: int | None = None,
        max_retries: int | None = None,
        backoff: Backoff | None = None,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        dead_on: tuple[type[BaseException], ...] = (),
        executor: ExecutorKind = "auto",
        idempotency_ttl: float | None = None,
        rate_limit: str | RateLimit | None = None,
        concurrency: int | ConcurrencyLimit | None = None,
        fair_by: str | Callable[..., Any] | None = None,
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        timeout: float | None = None,
        max_attempts: int | None = None,
        max_retries: int | None = None,
        backoff: Backoff | None = None,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        dead_on: tuple[type[BaseException], ...] = (),
        executor: ExecutorKind = "auto",
        idempotency_ttl: float | None = None,
        rate_limit: str | RateLimit | None = None,
        concurrency: int | ConcurrencyLimit | None = None,
        fair_by: str | Callable[..., Any] | None = None,
    ) -> Task[..., Any] | TaskDecorator:
        """Register a function as a task: ``@app.task`` or ``@app.task(queue="high", ...)``.

        ``rate_limit`` / ``concurrency`` / ``fair_by``: flow control, enforced by the claim on
        every worker together (docs/flow-control.md).

        The result is a ``Task[P, R]`` typed by the function (``R``: what an ``async def``
        returns when awaited), so mypy checks enqueue arguments and ``wait()``'s result.
        """
        flow = task_flow(rate_limit, concurrency, fair_by)

        def register(func: Callable[..., Any]) -> Task[..., Any]:
            task = build_task(
                self,
                func,
                name=name,
                queue=queue,
                priority=priority,
                timeout=timeout,
                max_attempts=max_attempts,
                max_retries=max_retries,
                backoff=backoff,
                retry_on=retry_on,
                dead_on=dead_on,
                executor=executor,
                idempotency_ttl=idempotency_ttl,
                flow=flow,
            )
            self.tasks[task.name] = task
            return task

        return register(fn) if fn is not None else cast(TaskDecorator, register)

    # ------------------------------------------------------------------ enqueue
    def enqueue(
        self,
        task: str | Task[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobHandle[Any]:
        """Enqueue by task name. The arguments are bound against a registered task's
        signature; a name this app does not register is refused (with a "did you mean")
        when the app registers any task, unless ``Conveyor(strict_names=False)``. An app
        with no tasks at all enqueues any name (a producer of another service's tasks)."""
        return self.runtime.enqueue(
            task, args, kwargs, bind=True, known_only=self.strict_names, **options
        )

    async def enqueue_async(
        self,
        task: str | Task[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobHandle[Any]:
        """``enqueue`` for async code: never blocks the event loop."""
        return await self.runtime.enqueue_async(
            task, args, kwargs, bind=True, known_only=self.strict_names, **options
        )

    def enqueue_many(
        self, specs: Iterable[JobSpec], connection: Any = None
    ) -> list[JobHandle[Any]]:
        """Store every job or none (atomic), returning their handles in order.

        ``connection``: a database connection (DB-API, SQLAlchemy ``Connection``/``Session``,
        Django's): the jobs are stored inside its transaction (docs/transactions.md).
        """
        return self.runtime.enqueue_many(specs, connection, bind=True, known_only=self.strict_names)

    async def enqueue_many_async(self, specs: Iterable[JobSpec]) -> list[JobHandle[Any]]:
        """``enqueue_many`` for async code (Redis: its native async client; SQLite and
        memory: a worker thread), never blocking the event loop."""
        return await self.runtime.enqueue_many_async(specs, bind=True, known_only=self.strict_names)

    def build_job(self, spec: JobSpec, now: float) -> Job:
        """Validate a spec and build the Job record it describes (not stored)."""
        return self.runtime.producer.build_job(spec, now)

    # ------------------------------------------------------------------ consumers
    def dequeue(
        self, queue: str = "default", visibility_timeout: float | None = None
    ) -> Delivery | None:
        """Lease one job (SQS style); None when nothing is ready.

        Like a worker, it first returns expired leases to the queue (at most one reaper pass
        per ``reap_interval``), so a consumer that only calls ``dequeue`` still sees redeliveries.
        """
        members = self.pull_members(queue)  # ValidationError for a bad name, before any work
        vt = self.settings.visibility_timeout if visibility_timeout is None else visibility_timeout
        if isinstance(vt, bool) or not isinstance(vt, int | float) or not 0 < vt < float("inf"):
            raise ValidationError("visibility_timeout", f"must be a finite number > 0, got {vt!r}")
        if vt > MAX_DELAY:  # a lease that never expires: a dead consumer would hold the job
            raise ValidationError("visibility_timeout", too_long(vt))
        now = self.now()
        if now - self._last_reap >= self.settings.reap_interval:
            self.broker.reap_expired(now, max_lost=self.settings.max_lost)
            self._last_reap = now  # only once it worked: a failed pass is tried again next time
        leases = self.broker.claim(
            members,  # a sharded queue (declared here or not): every shard
            now,
            limit=1,
            visibility_timeout=vt,
            worker_id="dequeue",
            max_lost=self.settings.max_lost,
        )
        return Delivery(self.runtime, leases[0], vt) if leases else None

    def worker(self, queues: Sequence[str] | str | None = None, **options: Any) -> Worker:
        """A worker over ``queues`` (``["high:5", "default"]``, or "high:5,default").

        Without ``queues`` it serves ``default`` plus every ``queue=`` its registered tasks
        declare (and logs which at start-up).
        """
        from .worker.loop import Worker

        return Worker(self.runtime, queues, **options)

    def scheduler(self, **options: Any) -> Scheduler:
        """A scheduler: promotes due jobs, reaps expired leases, fires cron schedules."""
        from .scheduler.runner import Scheduler

        return Scheduler(self.runtime, **options)

    def close(self) -> None:
        """Store what the auto-batcher holds (if on), then close the broker's connections."""
        if self.runtime.producer.autobatch is not None:
            self.runtime.producer.autobatch.close()
        self.broker.close()


def _resolve_url(url: str | None, settings: Settings) -> str:
    global _default_url_logged
    resolved = url or settings.url or os.environ.get("CONVEYOR_URL")
    if resolved:
        return resolved
    if not _default_url_logged:
        log.info("no broker URL given: using %s in %s", DEFAULT_URL, os.getcwd())
        _default_url_logged = True
    return DEFAULT_URL


def _default_clock(broker: Broker) -> Clock:
    if broker.has_server_clock:
        from .broker.server_clock import ServerClock

        return ServerClock(broker)
    return SystemClock()
