"""The job side of a process-pool child: run one job inside its log context and hooks.

The worker sends each job with a small reference (id, task, queue, attempt) that becomes the
child's job context (``worker/logs.py``: the user's log records carry the job id), and, when
the worker's app has ``around_process`` middleware, the job itself and the worker's id: the
child enters the ``around_process`` hooks of the app it imported with the task (the same code,
configured in this process), on the thread that runs the handler.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from ..middleware import Around
from .logs import job_context


class ChildJob(NamedTuple):
    """What the job-context filter reads of the job a child runs."""

    id: str
    task: str
    queue: str
    attempts: int


class ChildWorker:
    """The worker as ``around_process`` hooks see it in a child: its id and its app."""

    def __init__(self, worker_id: str, app: Any) -> None:
        self.id = worker_id
        self.app = app
        self.runtime = getattr(app, "runtime", app)


def run_job(
    fn: Any,
    owner: Any,
    is_async: bool,
    args: Any,
    kwargs: Any,
    ref: tuple[str, str, str, int],
    around: tuple[str, Any] | None,
) -> Any:
    """Call ``fn(*args, **kwargs)`` as the job ``ref`` (``owner``: the ``Task`` it came from,
    whose app's middleware wraps the call when ``around`` = ``(worker_id, job)`` is given)."""
    token = job_context.set(ChildJob(*ref))
    try:
        hooks = _hooks(owner, around[0]) if around is not None else None
        if hooks is not None and around is not None:
            return hooks.call(around[1], lambda: _call(fn, is_async, args, kwargs))
        return _call(fn, is_async, args, kwargs)
    finally:
        job_context.reset(token)


def _hooks(owner: Any, worker_id: str) -> Around | None:
    app = getattr(owner, "app", None)
    middleware = getattr(app, "middleware", None)
    if not middleware:
        return None
    return Around.of(ChildWorker(worker_id, app), middleware)


def _call(fn: Any, is_async: bool, args: Any, kwargs: Any) -> Any:
    if is_async:
        return asyncio.run(fn(*args, **kwargs))
    return fn(*args, **kwargs)
