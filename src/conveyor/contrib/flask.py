"""Flask: an extension with app-factory support (``FlaskConveyor(app)`` or ``init_app(app)``).

Configuration comes from ``app.config``: ``CONVEYOR_URL`` (the broker; default as for
``Conveyor()``), ``CONVEYOR_SETTINGS`` (a dict of ``Settings`` overrides). Tasks are declared on
the extension before any app exists (``@conveyor.task``) and registered with every app it is
initialised for; ``task.enqueue(...)`` goes to the current Flask app's Conveyor (or, outside an
app context, to the one the extension was initialised with last, e.g. inside a worker).
``flask conveyor worker`` runs a worker inside the app context. The dashboard is ASGI: serve it
with ``conveyor dashboard`` next to the Flask app. See docs/integrations.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import click
from flask import Flask, current_app, has_app_context

from ..app import Conveyor
from ..config import Settings
from ..errors import ValidationError
from ..handles import JobHandle
from ..task import JobSpec, Task, build_task

EXTENSION = "conveyor"
#: ``@conveyor.task(...)`` options and their defaults (those of ``Conveyor.task``)
TASK_DEFAULTS: dict[str, Any] = {
    "name": None,
    "queue": "default",
    "priority": 0,
    "timeout": None,
    "max_attempts": None,
    "max_retries": None,
    "backoff": None,
    "retry_on": (Exception,),
    "dead_on": (),
    "executor": "auto",
    "idempotency_ttl": None,
}


class FlaskConveyor:
    """The Flask extension; ``.app`` is the Conveyor app of the current Flask app."""

    def __init__(self, flask_app: Flask | None = None, *, conveyor: Conveyor | None = None):
        self._given = conveyor
        self._tasks: list[Task[..., Any]] = []
        self._last: Conveyor | None = None
        #: every Conveyor built or given for an app (weak: a discarded test app is not kept)
        self._apps: weakref.WeakSet[Conveyor] = weakref.WeakSet()
        if flask_app is not None:
            self.init_app(flask_app)

    def init_app(self, flask_app: Flask) -> Conveyor:
        """Build (or take) the Conveyor app for ``flask_app`` from its config; register tasks."""
        conveyor = self._given or self._build(flask_app.config)
        for task in self._tasks:
            conveyor.tasks[task.name] = task
        flask_app.extensions[EXTENSION] = conveyor
        flask_app.cli.add_command(_cli_group(self))
        self._last = conveyor
        self._apps.add(conveyor)
        return conveyor

    @staticmethod
    def _build(config: Any) -> Conveyor:
        overrides = config.get("CONVEYOR_SETTINGS") or {}
        if not isinstance(overrides, dict):
            raise ValidationError("CONVEYOR_SETTINGS", "must be a dict of Settings fields")
        return Conveyor(config.get("CONVEYOR_URL"), settings=Settings.from_env(**overrides))

    @property
    def app(self) -> Conveyor:
        """The current Flask app's Conveyor (else the last one initialised)."""
        if has_app_context():
            found = current_app.extensions.get(EXTENSION)
            if isinstance(found, Conveyor):
                return found
        if self._last is None:
            raise RuntimeError("FlaskConveyor: call init_app(app) before using it")
        return self._last

    def enqueue_many(
        self, specs: Iterable[JobSpec], connection: Any = None
    ) -> list[JobHandle[Any]]:
        """Store jobs on the current app's Conveyor (what declared tasks enqueue through);
        ``connection``: inside that database transaction (docs/transactions.md)."""
        return self.app.enqueue_many(specs, connection)

    async def enqueue_many_async(self, specs: Iterable[JobSpec]) -> list[JobHandle[Any]]:
        """``enqueue_many`` for async code, on the current app's Conveyor."""
        return await self.app.enqueue_many_async(specs)

    def enqueue(
        self,
        task: str | Task[..., Any],
        args: list[Any] | tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobHandle[Any]:
        """``Conveyor.enqueue`` (by name) on the current app's Conveyor."""
        return self.app.enqueue(task, args, kwargs, **options)

    def task(self, fn: Callable[..., Any] | None = None, **options: Any) -> Any:
        """Declare a task (``@conveyor.task`` or ``@conveyor.task(queue=...)``), app-independent."""
        unknown = sorted(set(options) - set(TASK_DEFAULTS))
        if unknown:
            raise ValidationError(unknown[0], "is not a task option")

        def declare(func: Callable[..., Any]) -> Task[..., Any]:
            task = build_task(self, func, **{**TASK_DEFAULTS, **options})
            self._tasks.append(task)
            for conveyor in _initialised(self):
                conveyor.tasks[task.name] = task
            return task

        return declare(fn) if fn is not None else declare


def _initialised(ext: FlaskConveyor) -> list[Conveyor]:
    """Conveyor apps already built (every app initialised, not only the last): tasks declared
    late are registered with them too."""
    return list(ext._apps)


def _cli_group(ext: FlaskConveyor) -> click.Group:
    """``flask conveyor worker``: a worker inside the Flask app context."""
    from flask.cli import with_appcontext

    @click.group("conveyor", help="Conveyor background jobs.")
    def group() -> None:
        pass

    @group.command("worker")
    @click.option("--queues", default=None, help="queue[:weight],... (default: the app's)")
    @click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 1024))
    @click.option("--until-idle", is_flag=True, help="Run the due jobs, then exit.")
    @with_appcontext
    def worker(queues: str | None, concurrency: int, until_idle: bool) -> None:
        """Run a worker of this app's Conveyor (stop with Ctrl-C / SIGTERM: it drains)."""
        w = ext.app.worker(queues, concurrency=concurrency)
        if until_idle:
            click.echo(f"ran {w.run_until_idle()} job(s)")
            return
        raise SystemExit(w.run())

    return group
