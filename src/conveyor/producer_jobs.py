"""Job building for the producer: specs checked and built into jobs (or their handles).

Split out of ``producer.py`` (its ``Producer`` inherits ``JobBuilder``): the task defaults of
plain jobs (resolved once per task and batch), the ``Job.fast`` fields of a job without options,
the full validation of a job with options (``build_job``), ``unique=`` / ``debounce=`` keys and
the flow-control record (issue 15). ``producer.py`` keeps the encoding and the store. Methods
moved, not wrapped: the enqueue hot path makes the same calls as before.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any, Protocol

from .broker.base import Broker
from .config import Settings
from .core.cache import BoundedCache
from .core.flow import (
    RESERVED_KEY_PREFIXES,
    UNIQUE_TTL,
    TaskFlow,
    unique_idempotency_key,
    with_queue,
    with_unique_slot,
)
from .core.ids import new_ulid
from .core.job import (
    MAX_ATTEMPTS_UNSET,
    MAX_DELAY,
    Job,
    validate_identifier,
    validate_priority,
    validate_queue_name,
    validate_task_name,
)
from .core.lifecycle import initial_state
from .core.shards import ShardMap, ShardRouter
from .errors import ValidationError
from .handles import JobHandle
from .middleware import Middleware
from .producer_shards import route_job, shard_defaults
from .task import JobSpec, Task, check_options
from .task_args import unknown_task_error


class Host(Protocol):
    """What the producer uses of its app (``conveyor.runtime.Runtime`` is one)."""

    broker: Broker
    settings: Settings
    middleware: list[Middleware]
    tasks: dict[str, Task[..., Any]]
    id_rng: random.Random
    owner: Any  # what the enqueue middleware hooks receive as ``app``
    shards: ShardMap  # sharded queues (``app.queue(name, shards=N)``, core/shards.py)

    def now(self) -> float:
        """The current time."""
        ...


#: Task and queue names that passed validation (enqueue checks each name once per process).
_VALID_TASKS: BoundedCache[str, bool] = BoundedCache(10_000)
_VALID_QUEUES: BoundedCache[str, bool] = BoundedCache(10_000)


class JobBuilder:
    """Builds jobs for the ``Producer``: checks specs, resolves task defaults, sets flow records.

    ``app`` is set by ``Producer.__init__``; ``queue_flows`` and ``sharded`` too.
    """

    app: Host
    queue_flows: dict[str, TaskFlow]
    sharded: dict[str, Any]

    def build_batch(
        self, specs: Iterable[JobSpec], bind: bool, known_only: bool
    ) -> tuple[list[JobHandle[Any]], list[tuple[Any, ...] | None], float]:
        """Check each spec (type, task name, arguments) and build its job as a handle."""
        app = self.app
        now = app.now()
        tasks = app.tasks
        defaults: dict[str, tuple[Any, ...]] = {}
        jobs: list[JobHandle[Any]] = []
        plain: list[tuple[Any, ...] | None] = []  # the task defaults of a job without options
        router = ShardRouter(app.shards) if self.sharded else None  # one pick per batch
        for spec in specs:
            if type(spec) is not JobSpec and not isinstance(spec, JobSpec):
                kind = type(spec).__name__
                raise ValidationError("jobs", f"enqueue_many takes JobSpec items, got {kind}")
            if bind:
                task = tasks.get(spec.task)
                if task is not None:
                    task.binder.require(spec.args, spec.kwargs)
                elif known_only and tasks:
                    raise unknown_task_error(spec.task, list(tasks))
            if spec.options:
                jobs.append(JobHandle.bind(self.build_job(spec, now, router), app))
                plain.append(None)
            else:
                d = defaults.get(spec.task)
                if d is None:
                    d = defaults[spec.task] = self._defaults(spec.task)
                if router is not None and d[1] in self.sharded:
                    d = shard_defaults(app.tasks, d, spec.args, spec.kwargs, router)
                handle = self._plain(d, spec.args, spec.kwargs, now)
                jobs.append(handle)
                plain.append(d if self._flowed(handle) is None else None)
        return jobs, plain, now

    def _check_flow(self, job: Job) -> None:
        """Refuse a flow-controlled job on a backend that cannot enforce it."""
        if not getattr(self.app.broker, "supports_flow", False):
            raise ValidationError(
                "rate_limit",
                f"flow control (rate_limit, concurrency, fair_by, unique) of task {job.task!r}"
                f" is not implemented on the {type(self.app.broker).__name__} backend yet",
            )

    def _flowed(self, job: Job) -> dict[str, Any] | None:
        """Set the ``flow`` record of a job whose task has flow control (issue 15).

        One dict lookup per job when no task has flow control (the common case).
        """
        task = self.app.tasks.get(job.task)
        queued = self.queue_flows.get(job.queue) if self.queue_flows else None
        if (task is None or task.flow is None) and queued is None:
            return None
        # bad keys are refused by name first
        record = task.flow_record(job.args, job.kwargs) if task and task.flow else None
        if queued is not None:
            record = with_queue(record, job.queue, queued)
        job.flow = record
        self._check_flow(job)
        return job.flow

    def _defaults(self, name: str) -> tuple[Any, ...]:
        """(name, queue, priority, max_attempts, timeout, idempotency_ttl) of a task's jobs.

        The same tuple names the job's envelope template (``PlainEnvelopes.encode``).
        """
        if name not in _VALID_TASKS:
            _VALID_TASKS.put(validate_task_name(name), True)
        app = self.app
        task = app.tasks.get(name)
        queue = task.queue if task else "default"
        if queue not in _VALID_QUEUES:
            _VALID_QUEUES.put(validate_queue_name(queue), True)
        ttl = task.idempotency_ttl if task is not None else None
        return (
            name,
            queue,
            validate_priority(task.priority if task else 0),
            task.max_attempts if task else MAX_ATTEMPTS_UNSET,
            task.timeout if task else None,
            float(app.settings.idempotency_ttl if ttl is None else ttl),
        )

    def _plain(self, d: tuple[Any, ...], args: Any, kwargs: Any, now: float) -> JobHandle[Any]:
        """A pending job with the task's defaults, built as the handle that will be returned."""
        return JobHandle.fast(self._plain_fields(d, args, kwargs, now))

    def _plain_fields(
        self, d: tuple[Any, ...], args: Any, kwargs: Any, now: float
    ) -> dict[str, Any]:
        """The fields of a pending job with the task's defaults (``Job.fast`` fills the rest)."""
        name, queue, priority, max_attempts, timeout, ttl = d
        return {
            "id": new_ulid(now, self.app.id_rng),
            "task": name,
            "args": list(args) if args else [],
            "kwargs": dict(kwargs) if kwargs else {},
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "timeout": timeout,
            "run_at": now,
            "created_at": now,
            "errors": [],
            "history": [],
            "idempotency_ttl": ttl,
            "metadata": {},
            "_app": self.app,
        }

    def build_job(self, spec: JobSpec, now: float, router: ShardRouter | None = None) -> Job:
        """Validate a spec (with options) and build the Job record it describes (not stored).

        A job bound for a sharded queue gets its shard (``router``: the call's, shared by a
        batch; core/shards.py says which shard)."""
        job = self._build_job(spec, now)
        if self.sharded and job.queue in self.sharded:
            route_job(self.app.tasks, job, router or ShardRouter(self.app.shards))
        return job

    def _build_job(self, spec: JobSpec, now: float) -> Job:
        """``build_job`` before the shard is chosen."""
        if not isinstance(spec, JobSpec):
            kind = type(spec).__name__
            raise ValidationError("jobs", f"enqueue_many takes JobSpec items, got {kind}")
        name = spec.task
        if not spec.options:
            fields = self._plain_fields(self._defaults(name), spec.args, spec.kwargs, now)
            del fields["_app"]
            job = Job.fast(fields)
            self._flowed(job)
            return job
        if name not in _VALID_TASKS:
            _VALID_TASKS.put(validate_task_name(name), True)
        app = self.app
        task = app.tasks.get(name)
        opts = check_options(spec.options)  # JobSpecs built by hand skip enqueue()'s check
        delay = opts.get("delay") or 0.0
        run_at = opts.get("run_at")
        run_at = float(run_at) if run_at is not None else now + float(delay)
        if run_at - now > MAX_DELAY:  # a date no page can show, that never comes
            raise ValidationError("run_at", "must be at most 100 years (MAX_DELAY) from now")
        queue = validate_queue_name(opts.get("queue", task.queue if task else "default"))
        priority = validate_priority(opts.get("priority", task.priority if task else 0))
        default_attempts = task.max_attempts if task else MAX_ATTEMPTS_UNSET
        ttl = opts.get("idempotency_ttl")
        if ttl is None and task is not None:
            ttl = task.idempotency_ttl
        ttl = app.settings.idempotency_ttl if ttl is None else ttl
        key = opts.get("idempotency_key")
        if key is not None:
            validate_identifier(key, "idempotency_key")
            if key.startswith(RESERVED_KEY_PREFIXES):
                # unique= and debounce= store their keys there: a caller's own key would take
                # on their semantics (a "debounce:" key replaces the waiting job's arguments)
                raise ValidationError(
                    "idempotency_key", "must not start with 'unique:' or 'debounce:' (reserved)"
                )
        unique, ukey = opts.get("unique"), ""
        if unique is not None or opts.get("debounce") is not None:
            key, ttl, run_at, ukey = _dedup(opts, spec, now, ttl, run_at)
        job_id = opts.get("job_id")
        if job_id is None:
            job_id = new_ulid(now, app.id_rng)
        else:
            validate_identifier(job_id, "job_id", slash=False)
        metadata = opts.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ValidationError("metadata", "must be a dict")
        job = Job(
            id=job_id,
            task=name,
            args=list(spec.args),
            kwargs=dict(spec.kwargs),
            queue=queue,
            priority=priority,
            state=initial_state(run_at, now),
            max_attempts=opts.get("max_attempts") or default_attempts,
            timeout=opts.get("timeout", task.timeout if task else None),
            run_at=run_at,
            created_at=now,
            idempotency_key=key,
            idempotency_ttl=float(ttl),
            metadata=metadata,
            retry_on=opts.get("retry_on"),
            dead_on=opts.get("dead_on"),
            expires_at=None if opts.get("expires_in") is None else now + opts["expires_in"],
        )
        self._flowed(job)
        if unique in ("while_running", "until_done"):
            job.flow = with_unique_slot(job.flow, ukey)
            self._check_flow(job)
        return job


def _args_key(task: str, args: Any, kwargs: Any) -> str:
    """The default unique key of a job: its task and a digest of its arguments."""
    import hashlib

    import orjson

    from .core.serialization import encode_value

    raw = orjson.dumps(
        [task, encode_value(list(args), "args"), encode_value(dict(kwargs), "kwargs")],
        option=orjson.OPT_SORT_KEYS,
    )
    return f"{task}:{hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:20]}"


def _dedup(
    opts: dict[str, Any], spec: JobSpec, now: float, ttl: float, run_at: float
) -> tuple[str | None, float, float, str]:
    """Issue 15: (idempotency key, its ttl, run_at, unique key) of a ``unique=`` or
    ``debounce=`` job; both ride on the brokers' idempotency keys, whose hold ends with the
    job's state (``core.flow.unique_holds``)."""
    long_ttl = UNIQUE_TTL if opts.get("idempotency_ttl") is None else ttl
    if opts.get("debounce") is not None:  # one waiting job per key, the newest args win
        ukey = opts.get("unique_key") or spec.task
        return f"debounce:{ukey}", long_ttl, now + float(opts["debounce"]), ukey
    unique = opts["unique"]
    ukey = opts.get("unique_key") or _args_key(spec.task, spec.args, spec.kwargs)
    if unique == "while_running":  # dedups nothing: a slot of 1 holds the second job
        return None, ttl, run_at, ukey
    return unique_idempotency_key(unique, ukey), long_ttl, run_at, ukey
