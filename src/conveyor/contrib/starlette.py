"""Starlette and FastAPI: a lifespan-managed worker, async enqueue, the dashboard under a prefix.

``lifespan(app)`` returns a lifespan function that starts one worker thread at start-up and
drains it at shutdown (for small deployments: one web process that also runs jobs);
``worker_lifespan(app)`` is the same as an async context manager, to nest in a lifespan of your
own. ``enqueue(task, *args)`` enqueues from an ``async def`` endpoint without blocking the event
loop. ``mount_dashboard(api, app, "/admin/jobs")`` mounts the dashboard's ASGI app; it keeps the
standalone server's rules (credentials from ``CONVEYOR_DASHBOARD_*``, the Host check, CSRF).
See docs/integrations.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from .worker_thread import WorkerThread

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..app import Conveyor
    from ..dashboard.security import DashboardConfig
    from ..handles import JobHandle
    from ..task import Task

Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


@asynccontextmanager
async def worker_lifespan(
    app: Conveyor,
    queues: Sequence[str] | str | None = None,
    *,
    shutdown_timeout: float | None = None,
    **options: Any,
) -> AsyncIterator[WorkerThread]:
    """Run a worker of ``app`` on a thread for the duration of the block, then drain it.

    ``options`` go to ``app.worker()`` (``concurrency=``, ``visibility_timeout=``...).
    """
    runner = WorkerThread(app, queues, shutdown_timeout=shutdown_timeout, **options)
    await asyncio.to_thread(runner.start)
    try:
        yield runner
    finally:
        # stop() blocks until drained: off the event loop, so other shutdown hooks still run.
        await asyncio.to_thread(runner.stop)


def lifespan(
    app: Conveyor,
    queues: Sequence[str] | str | None = None,
    **options: Any,
) -> Lifespan:
    """A lifespan for ``FastAPI(lifespan=...)``/``Starlette(lifespan=...)`` running a worker.

    The worker is available as ``api.state.conveyor_worker`` while the application runs.
    """

    @asynccontextmanager
    async def run(api: Any) -> AsyncIterator[None]:
        async with worker_lifespan(app, queues, **options) as runner:
            state = getattr(api, "state", None)
            if state is not None:
                state.conveyor_worker = runner
            yield

    return run


async def enqueue(task: Task[..., Any], *args: Any, **kwargs: Any) -> JobHandle[Any]:
    """``task.enqueue(*args, **kwargs)`` without blocking the event loop.

    Uses the task's native ``enqueue_async`` when this Conveyor version has one, else runs the
    synchronous enqueue on a worker thread.
    """
    native = getattr(task, "enqueue_async", None)
    if native is not None:
        handle: JobHandle[Any] = await native(*args, **kwargs)
        return handle
    return await asyncio.to_thread(task.enqueue, *args, **kwargs)


def dashboard_app(
    app: Conveyor,
    config: DashboardConfig | None = None,
    *,
    allowed_hosts: Sequence[str] = (),
    **overrides: Any,
) -> Starlette:
    """The dashboard's ASGI app for mounting in another application.

    ``allowed_hosts`` are the Host names the outer site is served under (the dashboard refuses
    other Host headers, as the standalone server does); without them only loopback names pass.
    """
    from dataclasses import replace

    from ..dashboard.security import DashboardConfig
    from ..dashboard.server import create_app

    cfg = config or DashboardConfig.from_env(**overrides)
    if allowed_hosts:
        cfg = replace(cfg, allowed_hosts=(*cfg.allowed_hosts, *allowed_hosts))
    return create_app(app, cfg)


def mount_dashboard(
    api: Starlette,
    app: Conveyor,
    path: str = "/admin/jobs",
    config: DashboardConfig | None = None,
    *,
    allowed_hosts: Sequence[str] = (),
    **overrides: Any,
) -> Starlette:
    """Mount the dashboard of ``app`` at ``path`` in ``api``; returns the dashboard app."""
    if not path.startswith("/") or path.endswith("/"):
        from ..errors import ValidationError

        raise ValidationError("path", "must start with '/' and not end with '/'")
    web = dashboard_app(app, config, allowed_hosts=allowed_hosts, **overrides)
    api.mount(path, web)
    return web
