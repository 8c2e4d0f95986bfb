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

Building the jobs (specs checked, task defaults, ``build_job``, unique / debounce keys, flow
records) lives in ``producer_jobs.py`` (``JobBuilder``, which ``Producer`` inherits); this
module encodes and stores.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .autobatch import AutoBatcher, from_settings
from .batchctx import current_batch
from .broker.base import EnqueueResult
from .core.flow import TaskFlow
from .core.job import Job
from .core.serialization import encode_envelope
from .core.shards import ShardRouter
from .handles import JobHandle
from .middleware import Middleware, after_enqueue_batch, hooked
from .producer_envelopes import PlainEnvelopes
from .producer_jobs import Host as Host  # re-exported: what the producer uses of its app
from .producer_jobs import JobBuilder
from .producer_shards import shard_defaults
from .task import JobSpec
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


class Producer(JobBuilder):
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
            if res.duplicate and (jobs[i].idempotency_key or "").startswith("debounce:"):
                # as ``store``: newest args, the delay restarts (off the loop: a broker call)
                await asyncio.to_thread(self.app.broker.replace_waiting, res.id, jobs[i], now)
            if res.duplicate:
                existing = await self.app.broker.get_async(res.id)
                if existing is None:  # gone meanwhile: report the stored job's id, as ``store``
                    existing = Job.fast({**jobs[i].__dict__, "id": res.id, "state": res.state})
                handles = list(handles) if handles is jobs else handles
                handles[i] = JobHandle.bind(existing, self.app, duplicate=True)
        return handles

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
