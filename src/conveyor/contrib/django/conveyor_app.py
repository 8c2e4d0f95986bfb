"""The project's app from ``settings.CONVEYOR``, enqueueing on commit inside transactions.

A job enqueued inside ``transaction.atomic()`` is validated and given its id at once (errors are
raised where the call is), but stored only by ``transaction.on_commit``: a rollback leaves no job,
and a worker never sees a job whose rows are not committed yet. The returned handle carries that
id; ``handle.refresh()`` finds the job once the transaction committed. Outside a transaction
(autocommit) the job is stored at once.

``"IN_TRANSACTION": True`` stores the job *inside* the transaction instead, with Django's own
connection (``connection=`` enqueue, docs/transactions.md): for a broker on Django's database (a
SQLite broker on the same file, the PostgreSQL backend on the same database). ``"OUTBOX"``
installs the transactional outbox for any other broker (Redis): rows in Django's database, moved
by ``conveyor relay`` or, with ``{"RELAY_IN_WORKER": True}``, by every worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, transaction

from ...app import Conveyor
from ...config import Settings
from ...errors import ConveyorError
from ...handles import JobHandle
from ...task import JobSpec, Task, check_options
from ...task_args import unknown_task_error

KEYS = ("URL", "SETTINGS", "ON_COMMIT", "DATABASE", "IN_TRANSACTION", "OUTBOX")
OUTBOX_KEYS = ("TABLE", "RELAY_IN_WORKER", "BATCH", "INTERVAL")


class DjangoConveyor(Conveyor):
    """A ``Conveyor`` whose enqueues inside ``transaction.atomic()`` wait for the commit."""

    def __init__(
        self,
        url: Any = None,
        *,
        on_commit: bool = True,
        database: str = DEFAULT_DB_ALIAS,
        in_transaction: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(url, **options)
        self.on_commit = on_commit
        self.database = database  # the connection whose transaction defers enqueues
        #: inside ``atomic()``, store with Django's connection in the transaction (no deferral)
        self.store_in_transaction = in_transaction

    def in_transaction(self) -> bool:
        """True inside ``transaction.atomic()`` on the configured database (deferral applies)."""
        return (self.on_commit or self.store_in_transaction) and transaction.get_connection(
            self.database
        ).in_atomic_block

    def enqueue(
        self,
        task: str | Task[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobHandle[Any]:
        """``Conveyor.enqueue``, stored on commit inside a transaction (or, with
        ``connection=``, inside that transaction: docs/transactions.md)."""
        if not self.in_transaction() or options.get("connection") is not None:
            return super().enqueue(task, args, kwargs, **options)
        if args is not None and not isinstance(args, list | tuple):
            return super().enqueue(task, args, kwargs, **options)  # its ValidationError
        name = task.name if isinstance(task, Task) else task
        spec = JobSpec(name, tuple(args or ()), dict(kwargs or {}), check_options(options))
        return self.enqueue_many([spec])[0]

    def enqueue_many(
        self, specs: Iterable[JobSpec], connection: Any = None
    ) -> list[JobHandle[Any]]:
        """``Conveyor.enqueue_many``, stored (all or none) on commit inside a transaction.

        ``connection`` (e.g. ``django.db.connection``): stored inside that transaction instead
        of after it, when the broker shares the database or an outbox is installed.
        """
        if connection is not None or not self.in_transaction():
            return super().enqueue_many(specs, connection)
        if self.store_in_transaction:
            return super().enqueue_many(specs, transaction.get_connection(self.database))
        now = self.now()
        pinned: list[JobSpec] = []
        handles: list[JobHandle[Any]] = []
        for spec in specs:
            task = self.tasks.get(spec.task)  # the same checks as an immediate enqueue
            if task is not None:
                task.binder.require(spec.args, spec.kwargs)
            elif self.strict_names and self.tasks:
                raise unknown_task_error(spec.task, list(self.tasks))
            job = self.build_job(spec, now)  # validates now, where the caller can see the error
            pinned.append(replace(spec, options={**spec.options, "job_id": job.id}))
            handles.append(JobHandle.bind(job, self))
        store = super().enqueue_many
        transaction.on_commit(lambda: store(pinned), using=self.database, robust=False)
        return handles

    async def enqueue_many_async(self, specs: Iterable[JobSpec]) -> list[JobHandle[Any]]:
        """``Conveyor.enqueue_many_async``; inside ``transaction.atomic()`` the jobs are
        deferred to the commit like ``enqueue_many`` (building them never blocks)."""
        if self.in_transaction():
            return self.enqueue_many(specs)
        return await super().enqueue_many_async(specs)

    async def enqueue_async(
        self,
        task: str | Task[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobHandle[Any]:
        """``Conveyor.enqueue_async``, deferred to the commit inside a transaction."""
        if self.in_transaction():
            return self.enqueue(task, args, kwargs, **options)
        return await super().enqueue_async(task, args, kwargs, **options)


def from_settings() -> DjangoConveyor:
    """Build the app ``settings.CONVEYOR`` describes (every key optional)."""
    conf = getattr(settings, "CONVEYOR", {})
    if not isinstance(conf, dict):
        raise ImproperlyConfigured("settings.CONVEYOR must be a dict")
    unknown = sorted(set(conf) - set(KEYS))
    if unknown:
        raise ImproperlyConfigured(
            f"settings.CONVEYOR: unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})"
        )
    overrides = conf.get("SETTINGS", {})
    if not isinstance(overrides, dict):
        raise ImproperlyConfigured("settings.CONVEYOR['SETTINGS'] must be a dict")
    outbox = conf.get("OUTBOX", False)
    if not isinstance(outbox, bool | dict):
        raise ImproperlyConfigured("settings.CONVEYOR['OUTBOX'] must be False, True or a dict")
    database = conf.get("DATABASE", DEFAULT_DB_ALIAS)
    if database not in settings.DATABASES:  # else it fails at the first atomic(), not here
        raise ImproperlyConfigured(
            f"settings.CONVEYOR['DATABASE'] must be an alias of settings.DATABASES "
            f"(known: {', '.join(map(str, settings.DATABASES))}), got {database!r}"
        )
    try:
        app = DjangoConveyor(
            conf.get("URL"),
            settings=Settings.from_env(**overrides),
            on_commit=_flag(conf, "ON_COMMIT", True, "settings.CONVEYOR"),
            database=database,
            in_transaction=_flag(conf, "IN_TRANSACTION", False, "settings.CONVEYOR")
            or bool(outbox),
        )
        if outbox:
            install_outbox(app, outbox if isinstance(outbox, dict) else {})
        return app
    except (ConveyorError, TypeError) as exc:
        raise ImproperlyConfigured(f"settings.CONVEYOR: {exc}") from exc


def install_outbox(app: DjangoConveyor, conf: dict[str, Any]) -> None:
    """``settings.CONVEYOR["OUTBOX"]``: the outbox table lives in Django's database; the relay
    opens its own connections from Django's settings of that database (``new_connection``)."""
    from ...outbox import DEFAULT_TABLE, Outbox

    where = "settings.CONVEYOR['OUTBOX']"
    unknown = sorted(set(conf) - set(OUTBOX_KEYS))
    if unknown:
        raise ImproperlyConfigured(f"{where}: unknown key(s) {unknown}")
    Outbox(
        app,
        table=str(conf.get("TABLE", DEFAULT_TABLE)),
        relay_in_worker=_flag(conf, "RELAY_IN_WORKER", False, where),
        batch=_number(conf, "BATCH", 500, where, int),
        interval=_number(conf, "INTERVAL", 0.5, where, float),
        connect=lambda: new_connection(app.database),
    )


def _flag(conf: dict[str, Any], key: str, default: bool, where: str) -> bool:
    """A boolean setting: True/False (or 1/0) only — ``bool("false")`` would be True."""
    value = conf.get(key, default)
    if isinstance(value, int) and value in (0, 1):  # bool is an int
        return bool(value)
    raise ImproperlyConfigured(f"{where}['{key}'] must be True or False, got {value!r}")


def _number(conf: dict[str, Any], key: str, default: Any, where: str, kind: type) -> Any:
    """A numeric setting converted to ``kind``; anything else is refused naming the key."""
    value = conf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int if kind is int else int | float):
        raise ImproperlyConfigured(f"{where}['{key}'] must be a {kind.__name__}, got {value!r}")
    return kind(value)


def new_connection(alias: str = DEFAULT_DB_ALIAS) -> Any:
    """A new DB-API connection to Django's database ``alias``, outside Django's management
    (the relay's thread or process owns and closes it)."""
    from django.db import connections

    wrapper = connections[alias]
    return wrapper.get_new_connection(wrapper.get_connection_params())
