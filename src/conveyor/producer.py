"""The enqueue path of ``Conveyor``: build jobs from specs, encode them once, store, bind handles.

This is a producer's hot path (one call per job, or ``enqueue_many`` batches), so the common
case — a job without per-call options — takes a lean road:

* the job is built directly as the ``JobHandle`` that is returned (no ``Job`` plus a copy), by
  ``Job.fast`` (no ``__init__``), with the task's defaults resolved once per task and batch;
* its envelope comes from ``producer_envelopes.PlainEnvelopes`` (a byte template per task, the
  same bytes as ``encode_envelope``) unless a middleware implements ``before_enqueue`` (which
  may change the job, so every job is then encoded in full);
* ids come from ``core.ids.IdRandom`` (buffered ``os.urandom``).

Jobs with options (``queue=``, ``delay=``, ``idempotency_key=``, ...) are validated and built
by ``build_job`` and encoded with ``encode_envelope``. Either way the broker receives fully
built jobs and their encoded envelopes in ONE ``Broker.enqueue`` call (atomic: all or none).
With auto-batching on (``conveyor.autobatch``), a single-job call hands its encoded job to the
app's ``AutoBatcher`` instead, which stores it together with other callers' jobs.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .autobatch import AutoBatcher, from_settings
from .batchctx import current_batch
from .broker.base import Broker, EnqueueResult
from .config import Settings
from .core.cache import BoundedCache
from .core.flow import (
    UNIQUE_TTL,
    TaskFlow,
    unique_idempotency_key,
    with_queue,
    with_unique_slot,
)
from .core.ids import new_ulid
from .core.job import (
    MAX_ATTEMPTS_UNSET,
    Job,
    validate_identifier,
    validate_priority,
    validate_queue_name,
    validate_task_name,
)
from .core.lifecycle import initial_state
from .core.serialization import encode_envelope
from .core.shards import ShardMap, ShardRouter
from .errors import ValidationError
from .handles import JobHandle
from .middleware import Middleware, after_enqueue_batch, hooked
from .producer_envelopes import PlainEnvelopes
from .producer_shards import route_job, shard_defaults
from .task import JobSpec, Task, check_options
from .task_args import unknown_task_error
from .txn import raw_connection


class TransactionalStore(Protocol):
    """Stores jobs inside the caller's transaction (``Broker`` has the same method)."""

    def enqueue_in_transaction(
        self,
        connection: Any,
        jobs: Sequence[Job],
        *,
        payloads: Sequence[bytes] | None = None,
    ) -> list[EnqueueResult]:
        """Store ``jobs`` (encoded as ``payloads``) with the raw DB-API ``connection``; see
        ``Broker``."""
        ...


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


class Producer:
    """Builds, encodes and stores jobs for one app (``app.enqueue`` / ``app.enqueue_many``)."""

    def __init__(self, app: Host) -> None:
        self.app = app
        #: limits of whole queues (``app.queue(name, rate_limit=..., concurrency=...)``)
        self.queue_flows: dict[str, TaskFlow] = {}
        self.envelopes = PlainEnvelopes(app.settings.max_payload_bytes)
        self._hook_key: tuple[Middleware, ...] | None = None
        self._hook_lists: tuple[list[Middleware], list[Middleware]] = ([], [])
        #: what stores ``connection=`` enqueues instead of the broker (``conveyor.outbox``)
        self.transactional: TransactionalStore | None = None
        #: opt-in auto-batching of single-job enqueues (``conveyor.autobatch``), or None
        self.autobatch: AutoBatcher | None = from_settings(app, app.settings)
        #: logical sharded queues -> their shards (a dict: one truth test per plain enqueue)
        self.sharded = app.shards.queues

    def hooks(self) -> tuple[list[Middleware], list[Middleware]]:
        """The middleware with enqueue hooks: ``(before_enqueue, after_enqueue[_batch])``.

        Recomputed only when the app's middleware list changed (a tuple compare per enqueue
        instead of a scan of every hook of every middleware).
        """
        key = tuple(self.app.middleware)
        if key != self._hook_key:
            self._hook_key = key
            self._hook_lists = (
                hooked(key, "before_enqueue"),
                hooked(key, "after_enqueue", "after_enqueue_batch"),
            )
        return self._hook_lists

    def enqueue_many(
        self,
        specs: Iterable[JobSpec],
        connection: Any = None,
        *,
        bind: bool = False,
        known_only: bool = False,
    ) -> list[JobHandle[Any]]:
        """Store every job or none (atomic), returning their handles in order.

        ``connection``: store them inside the caller's database transaction (``conveyor.txn``).

        ``bind``: check the arguments of registered tasks against their signatures;
        ``known_only``: refuse a task name this app has not registered (when it has any).
        The ``Conveyor`` facade asks for both; workers' and operators' paths (scheduler,
        dashboard, CLI) store what they are given and let the worker judge it.
        """
        jobs, plain, now = self.build_batch(specs, bind, known_only)
        return self.store(jobs, plain, now, connection)

    async def enqueue_many_async(
        self, specs: Iterable[JobSpec], *, bind: bool = False, known_only: bool = False
    ) -> list[JobHandle[Any]]:
        """``enqueue_many`` for async callers: jobs are built and encoded on the caller's
        thread (CPU only), the broker call never blocks the event loop."""
        jobs, plain, now = self.build_batch(specs, bind, known_only)
        if not jobs:
            return []
        batch = current_batch.get()
        if batch is not None and (kept := batch.collect(self.app, jobs)):
            return kept  # stored with the batch's callbacks when its block ends
        payloads, after, fresh = self.encode(jobs, plain)
        auto = self.autobatch
        if auto is not None and len(jobs) == 1:  # joins other callers' jobs (autobatch.py)
            submitted = auto.submit(jobs[0], payloads[0], now, fresh)
            results = [await asyncio.wrap_future(submitted)]
        else:
            results = await self.app.broker.enqueue_async(jobs, now, payloads, fresh_ids=fresh)
        if after:
            after_enqueue_batch(after, self.app.owner, jobs, [res.duplicate for res in results])
        handles = jobs
        for i, res in enumerate(results):
            if res.duplicate:
                existing = await self.app.broker.get_async(res.id)
                handles = list(handles) if handles is jobs else handles
                handles[i] = JobHandle.bind(existing or jobs[i], self.app, duplicate=True)
        return handles

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

    def enqueue_one(
        self, name: str, args: Any, kwargs: Any, *, bind: bool = False, known_only: bool = False
    ) -> JobHandle[Any]:
        """``app.enqueue`` without options: one job, no ``JobSpec`` (flags: ``enqueue_many``)."""
        if bind:
            task = self.app.tasks.get(name)
            if task is not None:
                task.binder.require(args or (), kwargs or {})
            elif known_only and self.app.tasks:
                raise unknown_task_error(name, list(self.app.tasks))
        now = self.app.now()
        d = self._defaults(name)
        if self.sharded and d[1] in self.sharded:
            d = shard_defaults(self.app.tasks, d, args, kwargs, ShardRouter(self.app.shards))
        handle = self._plain(d, args, kwargs, now)
        return self.store([handle], [d if self._flowed(handle) is None else None], now)[0]

    def encode(
        self, jobs: list[JobHandle[Any]], plain: list[tuple[Any, ...] | None]
    ) -> tuple[list[bytes], list[Middleware], bool]:
        """Run ``before_enqueue`` hooks and encode every job once: (payloads, the
        ``after_enqueue`` middleware, whether every id is freshly minted)."""
        app = self.app
        before, after = self.hooks()
        limit = app.settings.max_payload_bytes
        if before:
            payloads = []
            for job in jobs:
                for mw in before:
                    mw.before_enqueue(app.owner, job)
                payloads.append(encode_envelope(job, limit))
        else:
            encode = self.envelopes.encode
            payloads = [
                encode(job, d) if d is not None else encode_envelope(job, limit)
                for job, d in zip(jobs, plain, strict=True)
            ]
        # plain jobs carry new ULIDs, never custom ids (unless a before_enqueue hook changed one)
        fresh = not before and all(d is not None for d in plain)
        return payloads, after, fresh

    def store(
        self,
        jobs: list[JobHandle[Any]],
        plain: list[tuple[Any, ...] | None],
        now: float,
        connection: Any = None,
    ) -> list[JobHandle[Any]]:
        """Run the enqueue middleware, encode once, store in one broker call, bind results.

        ``plain[i]``: the task defaults job ``i`` was built from without options, else None.
        ``connection``: the caller's database connection; the jobs are then stored inside its
        transaction by ``transactional`` (the outbox, when one is installed) or the broker's
        ``enqueue_in_transaction``, given the payloads encoded here (encoded once).
        """
        if not jobs:
            return []
        app = self.app
        batch = current_batch.get()
        if batch is not None and (kept := batch.collect(app, jobs, connection)):
            return kept  # stored with the batch's callbacks when its block ends
        payloads, after, fresh = self.encode(jobs, plain)
        if connection is not None:
            store = self.transactional or app.broker
            raw = raw_connection(connection)
            results = store.enqueue_in_transaction(raw, jobs, payloads=payloads)
        elif self.autobatch is not None and len(jobs) == 1:  # joins other callers' jobs
            results = [self.autobatch.write(jobs[0], payloads[0], now, fresh)]
        else:
            results = app.broker.enqueue(jobs, now, payloads, fresh_ids=fresh)
        if after:  # one call per batch (metrics: one buffered update instead of one per job)
            after_enqueue_batch(after, app.owner, jobs, [res.duplicate for res in results])
        handles = jobs
        for i, (job, res) in enumerate(zip(jobs, results, strict=True)):
            if res.duplicate and (job.idempotency_key or "").startswith("debounce:"):
                app.broker.replace_waiting(res.id, job, now)  # newest args, delay restarts
            if res.duplicate:
                if handles is jobs:
                    handles = list(jobs)
                existing = app.broker.get(res.id)
                if existing is None:  # uncommitted (same transaction): report its id at least
                    existing = Job.fast({**job.__dict__, "id": res.id, "state": res.state})
                handles[i] = JobHandle.bind(existing, app, duplicate=True)
        return handles

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
