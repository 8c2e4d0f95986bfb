"""Middleware: hooks around enqueue and processing where metrics, logs and extensions plug in.

Hooks run in registration order ("before" hooks) and in reverse order ("after" hooks), as in
Dramatiq. A hook that raises is logged and skipped: a broken extension never kills a worker.

Every hook is declared here with a no-op default, so callers call them like any method and can
skip a middleware that does not override one (``overrides``). The batch hooks
(``after_enqueue_batch``, ``after_process_batch``) default to calling the per-job hook once per
job; a middleware that counts (metrics) overrides them to do one update per batch. The metrics
middleware is a plain ``Middleware``: ``conveyor.default_middleware()`` installs it and a user's
own list may leave it out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .broker.base import Broker
    from .core.job import Job

log = logging.getLogger("conveyor.middleware")


class AppView(Protocol):
    """What enqueue hooks receive: the app (its broker and clock)."""

    @property
    def broker(self) -> Broker:
        """The app's broker."""
        ...

    def now(self) -> float:
        """The app's clock."""
        ...


class WorkerView(Protocol):
    """What processing hooks receive: the worker (its id and its app)."""

    @property
    def id(self) -> str:
        """The worker's id."""
        ...

    @property
    def app(self) -> AppView:
        """The app the worker runs jobs of."""
        ...

    @property
    def runtime(self) -> AppView:
        """The worker's runtime (its broker and clock)."""
        ...


class Middleware:
    """Base class: override the hooks you need; all are no-ops by default."""

    def before_enqueue(self, app: AppView, job: Job) -> None:
        """A job is about to be stored (raise ValidationError to refuse it)."""

    def after_enqueue(self, app: AppView, job: Job, duplicate: bool) -> None:
        """A job was stored (or matched an idempotency key)."""

    def after_enqueue_batch(
        self, app: AppView, jobs: Sequence[Job], duplicates: Sequence[bool]
    ) -> None:
        """One ``enqueue``/``enqueue_many`` call stored ``jobs`` (default: ``after_enqueue``
        for each; one that raises is logged and the others still run)."""
        for job, duplicate in zip(jobs, duplicates, strict=True):
            _safely(self, "after_enqueue", self.after_enqueue, app, job, duplicate)

    def before_process(self, worker: WorkerView, job: Job) -> None:
        """A claimed job is about to run."""

    def after_process(
        self,
        worker: WorkerView,
        job: Job,
        *,
        outcome: str,
        duration: float,
        error: BaseException | None,
    ) -> None:
        """A job ran; ``outcome`` is completed, retry_scheduled, dead_letter or lease_lost."""

    def after_process_batch(
        self, worker: WorkerView, jobs: Sequence[Job], durations: Sequence[float]
    ) -> None:
        """A batch of jobs completed (the recorder writes successes in batches; failures always
        get ``after_process``). Default: ``after_process(outcome="completed")`` for each."""
        for job, duration in zip(jobs, durations, strict=True):
            _safely(
                self,
                "after_process",
                self.after_process,
                worker,
                job,
                outcome="completed",
                duration=duration,
                error=None,
            )

    def around_process(self, worker: WorkerView, job: Job) -> AbstractContextManager[object] | None:
        """A context manager to enter around the handler ON THE HANDLER'S OWN THREAD (None: do
        nothing), e.g. a tracing span or a context variable the handler's code sees.

        Entered right before the task function is called and exited right after, with the
        handler's exception if it raised (an exception cannot be suppressed: the job still
        fails). Thread executor: the job's thread; asyncio: inside the job's asyncio task on the
        loop thread; ``executor="process"``: in the pool's child, with the middleware of the app
        the child imported with the task (``worker.id`` is the worker's). Write it with
        ``@contextlib.contextmanager``. Hooks nest in registration order; one that raises on
        entry or exit is logged and skipped.
        """
        return None

    def on_retry(self, worker: WorkerView, job: Job, retry_at: float) -> None:
        """A failed job will run again at ``retry_at``."""

    def on_dead_letter(self, worker: WorkerView, job: Job, reason: str) -> None:
        """A job went to the dead-letter queue."""

    def on_lease_lost(self, worker: WorkerView, job: Job) -> None:
        """The worker lost the lease of a job; its outcome was discarded."""

    def on_release(self, worker: WorkerView, job: Job) -> None:
        """A job was given back unfinished, without an attempt (worker shutdown); it gets no
        ``after_process``."""

    def on_worker_start(self, worker: WorkerView) -> None:
        """A worker started."""

    def on_worker_stop(self, worker: WorkerView) -> None:
        """A worker stopped."""


def overrides(mw: Middleware, hook: str) -> bool:
    """True when ``mw``'s class implements ``hook`` (the base class's hooks do nothing), so hot
    paths call only the middleware that do something."""
    return getattr(type(mw), hook, None) is not getattr(Middleware, hook)


def hooked(middleware: Sequence[Middleware], *hooks: str) -> list[Middleware]:
    """The middleware that implement any of ``hooks``, in order."""
    return [mw for mw in middleware if any(overrides(mw, hook) for hook in hooks)]


def emit(
    middleware: Sequence[Middleware], hook: str, *args: Any, reverse: bool = False, **kwargs: Any
) -> None:
    """Call the declared ``hook`` on every middleware; exceptions are logged, never propagated."""
    chain = reversed(middleware) if reverse else middleware
    for mw in chain:
        _safely(mw, hook, getattr(mw, hook), *args, **kwargs)


def after_enqueue_batch(
    middleware: Sequence[Middleware], app: AppView, jobs: Sequence[Job], duplicates: Sequence[bool]
) -> None:
    """Call ``after_enqueue_batch`` on each of ``middleware`` (a typed ``emit``)."""
    for mw in middleware:
        _safely(mw, "after_enqueue_batch", mw.after_enqueue_batch, app, jobs, duplicates)


def after_process_batch(
    middleware: Sequence[Middleware],
    worker: WorkerView,
    jobs: Sequence[Job],
    durations: Sequence[float],
) -> None:
    """Call ``after_process_batch`` on each of ``middleware``, last first (a typed ``emit``)."""
    for mw in reversed(middleware):
        _safely(mw, "after_process_batch", mw.after_process_batch, worker, jobs, durations)


def _safely(
    mw: Middleware, hook: str, call: Callable[..., object], *args: Any, **kwargs: Any
) -> None:
    try:
        call(*args, **kwargs)
    except Exception:
        log.exception("middleware %s.%s failed", type(mw).__name__, hook)


class Around:
    """The ``around_process`` hooks of one worker, called around each handler by the executors
    (built only when some middleware implements the hook: the hot path checks one attribute)."""

    __slots__ = ("hooks", "worker")

    def __init__(self, worker: WorkerView, hooks: Sequence[Middleware]) -> None:
        self.worker = worker
        self.hooks = list(hooks)

    @classmethod
    def of(cls, worker: WorkerView, middleware: Sequence[Middleware]) -> Around | None:
        """The hooks of ``middleware`` for ``worker``, or None when none implements them."""
        hooks = hooked(middleware, "around_process")
        return cls(worker, hooks) if hooks else None

    def call(self, job: Job, fn: Callable[[], Any]) -> Any:
        """``fn()`` inside every hook's context manager (on this thread)."""
        entered = self._enter(job)
        try:
            result = fn()
        except BaseException as exc:
            _exit_all(entered, exc)
            raise
        _exit_all(entered, None)
        return result

    async def acall(self, job: Job, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``await fn()`` inside every hook's context manager (in the current asyncio task)."""
        entered = self._enter(job)
        try:
            result = await fn()
        except BaseException as exc:
            _exit_all(entered, exc)
            raise
        _exit_all(entered, None)
        return result

    def _enter(self, job: Job) -> list[tuple[Middleware, AbstractContextManager[object]]]:
        entered = []
        for mw in self.hooks:
            try:
                cm = mw.around_process(self.worker, job)
                if cm is not None:
                    cm.__enter__()
                    entered.append((mw, cm))
            except Exception:
                log.exception("middleware %s.around_process failed", type(mw).__name__)
        return entered


def _exit_all(
    entered: list[tuple[Middleware, AbstractContextManager[object]]], exc: BaseException | None
) -> None:
    """Exit the entered hooks, last first; their return value (suppression) is ignored."""
    for mw, cm in reversed(entered):
        try:
            if exc is None:
                cm.__exit__(None, None, None)
            else:
                cm.__exit__(type(exc), exc, exc.__traceback__)
        except Exception:
            log.exception("middleware %s.around_process (exit) failed", type(mw).__name__)
