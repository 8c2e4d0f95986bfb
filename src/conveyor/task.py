"""Tasks: a registered function plus its policy; options and specs build jobs from calls.

The per-call options (names, validation) live in ``task_options.py``, re-exported here.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from .core.backoff import DEFAULT_BACKOFF, Backoff
from .core.flow import TaskFlow, job_flow
from .core.job import validate_duration, validate_max_attempts
from .core.retry import RetryPolicy, max_attempts_from
from .errors import PermanentError, ValidationError
from .task_args import SHAPE_CACHE_MAX as SHAPE_CACHE_MAX
from .task_args import ArgBinder
from .task_options import check_options as check_options  # re-exported (task_options.py)
from .task_options import datetime_to_epoch as datetime_to_epoch
from .task_options import validate_time as validate_time

if TYPE_CHECKING:
    from .handles import JobHandle
    from .workflow.canvas import Signature, Spec

P = ParamSpec("P")
#: the parameters after the first (a workflow step whose first argument comes from upstream)
P2 = ParamSpec("P2")
R = TypeVar("R")
ExecutorKind = Literal["auto", "thread", "asyncio", "process", "inline"]


@dataclass(frozen=True)
class JobSpec:
    """An un-enqueued job: a task name, arguments and options. ``app.enqueue_many`` takes these."""

    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    #: the ``Task`` that built it (``task.s(...)``): a workflow finds its app and checks the
    #: arguments with it; None for a spec written by hand
    origin: Any = field(default=None, compare=False, repr=False)


class Enqueuer(Protocol):
    """What a task needs of its app: ``enqueue_many`` (the facade or its runtime)."""

    def enqueue_many(
        self, specs: Iterable[JobSpec], connection: Any = None
    ) -> list[JobHandle[Any]]:
        """Store every job or none, returning their handles in order."""
        ...

    async def enqueue_many_async(self, specs: Iterable[JobSpec]) -> list[JobHandle[Any]]:
        """``enqueue_many`` without blocking the event loop."""
        ...


@dataclass
class Task(Generic[P, R]):
    """A function registered with an app, with its default queue and failure policy.

    Typed by the function: ``Task[P, R]`` where ``P`` are its parameters and ``R`` its result
    (for an ``async def``, what the coroutine returns), so mypy checks ``enqueue``, ``s``,
    ``enqueue_in``/``enqueue_at`` and ``options(...).enqueue`` arguments against the function,
    and ``enqueue(...).wait()`` returns ``R``. At run time the arguments are also bound against
    the signature at enqueue (``ValidationError`` naming the argument; ``task_args.py``).
    """

    app: Enqueuer
    fn: Callable[P, Any]
    name: str
    queue: str = "default"
    priority: int = 0
    timeout: float | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    executor: ExecutorKind = "auto"
    idempotency_ttl: float | None = None
    #: rate limit / per-key concurrency / fair groups (issue 15; docs/flow-control.md)
    flow: TaskFlow | None = None

    def __post_init__(self) -> None:
        if inspect.isgeneratorfunction(self.fn) or inspect.isasyncgenfunction(self.fn):
            # calling it only builds the generator: the job would "complete" without its body
            raise ValidationError(
                f"task {self.name!r}", "a generator function cannot be a task: return a list"
            )
        self.is_async = inspect.iscoroutinefunction(self.fn)
        self.binder = ArgBinder(self.name, self.fn)
        self.signature: inspect.Signature | None = self.binder.signature
        self._shapes = self.binder.shapes  # the verdicts by argument shape (check_arguments)
        self._plain = TaskOptions(self, {})

    def flow_record(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The ``flow`` record of a job of this task (its limiter keys evaluated now)."""
        assert self.flow is not None
        sig = self.signature
        params = list(sig.parameters) if sig is not None else []
        defaults = (
            {n: p.default for n, p in sig.parameters.items() if p.default is not p.empty}
            if sig is not None
            else None
        )
        return job_flow(self.name, self.flow, args, kwargs, params, defaults)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Call the function directly, in this process (no job)."""
        return self.fn(*args, **kwargs)

    @property
    def max_attempts(self) -> int:
        """Total runs allowed (default for this task's jobs)."""
        return self.policy.max_attempts

    def options(self, **options: Any) -> TaskOptions[P, R]:
        """Per-call overrides: queue, priority, job_id, idempotency_key, delay, run_at, ...

        ``retry_on`` / ``dead_on`` replace the task's classification for this job (exception
        classes or qualified names; ``PermanentError`` is always permanent).
        ``connection``: enqueue inside that database transaction (docs/transactions.md).
        """
        connection = options.pop("connection", None)
        return TaskOptions(self, check_options(options), connection)

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """Build an un-enqueued job for ``app.enqueue_many`` (arguments checked now)."""
        return self._plain.spec(*args, **kwargs)

    @overload
    def s(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec: ...

    @overload
    def s(self: Task[Concatenate[Any, P2], R], *args: P2.args, **kwargs: P2.kwargs) -> JobSpec: ...

    def s(self, *args: Any, **kwargs: Any) -> JobSpec:
        """A signature, in Celery's words: an un-enqueued job (``enqueue_many`` takes it) and a
        workflow step. After another step it gets the upstream result as first argument:
        ``chain(fetch.s(url), parse.s(), store.s())`` (docs/workflows.md), so the arguments
        may leave the first parameter out; they are checked now with that slot optional, and
        exactly when the workflow is built or the spec enqueued."""
        return self._plain.s(*args, **kwargs)

    def si(self, *args: P.args, **kwargs: P.kwargs) -> Spec:
        """An immutable workflow step: it runs with exactly these arguments and never gets
        its parents' results (Celery's ``si``); bound against the function now."""
        return self._plain.si(*args, **kwargs)

    def partial(self, *args: Any, **kwargs: Any) -> Signature:
        """The explicit form of a step that gets its parents' result as first argument
        (``.s()`` after another step does the same; docs/workflows.md)."""
        return self._plain.partial(*args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue a job that runs ``fn(*args, **kwargs)`` as soon as a worker is free."""
        return self._plain.enqueue(*args, **kwargs)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """``enqueue`` for async code: never blocks the event loop (docs: README, async)."""
        return await self._plain.enqueue_async(*args, **kwargs)

    def enqueue_in(
        self, seconds: float | dt.timedelta, *args: P.args, **kwargs: P.kwargs
    ) -> JobHandle[R]:
        """Enqueue to run ``seconds`` from now."""
        return self.options(delay=_seconds(seconds)).enqueue(*args, **kwargs)

    def enqueue_at(self, when: dt.datetime, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue to run at an aware datetime."""
        return self.options(run_at=when).enqueue(*args, **kwargs)

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """None if ``args``/``kwargs`` fit the function's signature, else the reason.

        ``Signature.bind`` only looks at how many positional arguments there are and at the
        keyword names in their order, never at values, so its verdict (and message) is cached
        per such shape: a worker binds once per shape, not once per job.
        """
        return self.binder.reason(args, kwargs)


@dataclass(frozen=True)
class TaskOptions(Generic[P, R]):
    """A task with per-call options bound; ``enqueue``/``spec`` use them."""

    task: Task[P, R]
    opts: Mapping[str, Any]
    #: the caller's database connection: enqueue inside its transaction (``conveyor.txn``)
    connection: Any = None

    def options(self, **options: Any) -> TaskOptions[P, R]:
        """Layer more options on top."""
        connection = options.pop("connection", self.connection)
        return replace(self, opts={**self.opts, **check_options(options)}, connection=connection)

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """Build an un-enqueued job (its arguments are bound against the function now)."""
        self.task.binder.require(args, kwargs)
        return JobSpec(self.task.name, args, kwargs, dict(self.opts) if self.opts else {})

    @overload
    def s(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec: ...

    @overload
    def s(
        self: TaskOptions[Concatenate[Any, P2], R], *args: P2.args, **kwargs: P2.kwargs
    ) -> JobSpec: ...

    def s(self, *args: Any, **kwargs: Any) -> JobSpec:
        """``Task.s`` with these options: the first parameter may be left to the step before
        (checked when the workflow is built or the spec enqueued)."""
        binder = self.task.binder
        if binder.reason(args, kwargs) is not None and binder.reason((None, *args), kwargs):
            raise binder.error(args, kwargs)  # fits neither with nor without the upstream slot
        opts = dict(self.opts) if self.opts else {}
        return JobSpec(self.task.name, args, kwargs, opts, origin=self.task)

    def si(self, *args: P.args, **kwargs: P.kwargs) -> Spec:
        """``Task.si`` with these options."""
        from .workflow.canvas import Spec

        spec = self.spec(*args, **kwargs)
        return Spec(replace(spec, origin=self.task), immutable=True)

    def partial(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step whose first argument comes from its parents (docs/workflows.md);
        the arguments are bound when the workflow is built."""
        from .workflow.canvas import Signature

        return Signature(self.task, tuple(args), dict(kwargs), dict(self.opts))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue with these options."""
        if not self.opts and self.connection is None:
            one = getattr(self.task.app, "enqueue", None)  # the facade's or runtime's
            if one is not None:  # the common call: no JobSpec, no batch (Producer.enqueue_one)
                self.task.binder.require(args, kwargs)
                handle_one: JobHandle[R] = one(self.task.name, args, kwargs)
                return handle_one
        specs = [self.spec(*args, **kwargs)]
        if self.connection is not None:  # inside the caller's transaction (docs/transactions.md)
            bound: JobHandle[R] = self.task.app.enqueue_many(specs, connection=self.connection)[0]
            return bound
        handle: JobHandle[R] = self.task.app.enqueue_many(specs)[0]
        return handle

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """``enqueue`` without blocking the event loop."""
        if self.connection is not None:
            raise ValidationError(
                "connection", "enqueue_async cannot use a connection: call enqueue() inside it"
            )
        spec = self.spec(*args, **kwargs)
        handles = await self.task.app.enqueue_many_async([spec])
        handle: JobHandle[R] = handles[0]
        return handle


class TaskDecorator(Protocol):
    """What ``@app.task(...)`` returns: registers a function as a typed ``Task[P, R]``."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Task[..., Any]:
        """Register ``fn``."""
        ...


def _seconds(value: float | dt.timedelta) -> float:
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def exception_types(value: object, field_name: str) -> tuple[type[BaseException], ...]:
    """A task's ``retry_on`` / ``dead_on``: one exception class or a list/tuple of them.

    Checked when the task is declared: anything else (a qualified name, which only a job's
    own ``retry_on`` takes; a class that is not an exception) made classifying the job's
    first failure raise in the worker.
    """
    items = (value,) if isinstance(value, type) else value
    if not isinstance(items, list | tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in items
    ):
        raise ValidationError(
            field_name,
            "must be an exception class or a list of them (qualified names are taken per"
            f" job: task.options({field_name}=[...])), got {value!r:.80}",
        )
    return tuple(items)


def build_task(
    app: Enqueuer,
    fn: Callable[P, Any],
    *,
    name: str | None,
    queue: str,
    priority: int,
    timeout: float | None,
    max_attempts: int | None,
    max_retries: int | None,
    backoff: Backoff | None,
    retry_on: tuple[type[BaseException], ...],
    dead_on: tuple[type[BaseException], ...],
    executor: ExecutorKind,
    idempotency_ttl: float | None,
    flow: TaskFlow | None = None,
) -> Task[P, Any]:
    """Validate decorator arguments and build the Task."""
    from .core.job import validate_priority, validate_queue_name, validate_task_name

    attempts = max_attempts_from(max_attempts, max_retries)
    if backoff is not None and not isinstance(backoff, Backoff):
        raise ValidationError(
            "backoff", f"must be a Backoff (Backoff.exponential(...)), got {backoff!r:.80}"
        )
    policy = RetryPolicy(
        max_attempts=validate_max_attempts(attempts if attempts is not None else 4),
        backoff=backoff or DEFAULT_BACKOFF,
        retry_on=exception_types(retry_on, "retry_on"),
        dead_on=(PermanentError, *exception_types(dead_on, "dead_on")),
    )
    if executor not in ("auto", "thread", "asyncio", "process", "inline"):
        raise ValidationError("executor", "must be auto, thread, asyncio, process or inline")
    return Task(
        app=app,
        fn=fn,
        name=validate_task_name(name or fn.__name__),
        queue=validate_queue_name(queue),
        priority=validate_priority(priority),
        timeout=None if timeout is None else validate_duration(timeout, "timeout"),
        policy=policy,
        executor=executor,
        idempotency_ttl=(
            None
            if idempotency_ttl is None
            else validate_duration(idempotency_ttl, "idempotency_ttl")
        ),
        flow=flow,
    )
