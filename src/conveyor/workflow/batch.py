"""Batches (Sidekiq style): jobs enqueued inside ``with app.batch(...) as b:`` are stored at the
end of the block, atomically, together with the callbacks as workflow nodes after all of them.

``on_complete`` runs once every job finished, whatever the outcome (edge policy "continue");
``on_success`` only if every job completed (it ends cancelled, ``upstream_failed``, at the first
failure); ``on_failure`` only if at least one failed (trigger "one_failed"). Each callback runs
exactly once: it is released by the completion of the batch's last job, in the same atomic step.
An exception inside the block stores nothing.

Every enqueue of the batch's app inside the block joins it: ``enqueue``, ``enqueue_many`` and
their ``_async`` forms (``async with app.batch(...)`` stores without blocking the event loop).
``connection=conn`` stores the whole batch inside the caller's transaction (SQLite, same
file; PostgreSQL, a psycopg connection to the broker's database); a job enqueued with
``connection=`` joins only such a batch, on the same connection.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..batchctx import Collector, current_batch
from ..broker.flow import FlowNode
from ..core.ids import new_ulid
from ..core.job import Job
from ..core.state import TERMINAL_STATES, JobState
from ..errors import ValidationError
from ..task import JobSpec
from .canvas import Signature, Spec
from .host import FlowHost
from .steps import spec_mode

if TYPE_CHECKING:
    from .handle import WorkflowHandle

_FAILED = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)  # on_failure runs


class Batch:
    """Collects enqueued jobs; stores them with the callbacks when the block ends."""

    def __init__(
        self,
        runtime: FlowHost,
        *,
        on_complete: Signature | Spec | JobSpec | None = None,
        on_success: Signature | Spec | JobSpec | None = None,
        on_failure: Signature | Spec | JobSpec | None = None,
        name: str = "",
        connection: Any = None,
    ) -> None:
        for field, sig in (
            ("on_complete", on_complete),
            ("on_success", on_success),
            ("on_failure", on_failure),
        ):
            if sig is not None and not isinstance(sig, Signature | Spec | JobSpec):
                raise ValidationError(field, "takes task.s(...), task.si(...) or task.partial(...)")
            if isinstance(sig, JobSpec):  # checked now: a callback gets no result
                spec_mode(runtime, sig, "none")
        if not isinstance(name, str) or len(name) > 200:  # as a workflow's enqueue(name=)
            raise ValidationError("name", "must be a string of at most 200 characters")
        self._rt = runtime
        self.connection = connection
        if connection is not None:
            _check_transactional(runtime)
        self.name = name
        self.id = new_ulid(runtime.now(), runtime.id_rng)
        self.callbacks = {"on_complete": on_complete, "on_success": on_success}
        self.on_failure = on_failure
        self.jobs: list[Job] = []
        self.handle: WorkflowHandle | None = None
        self._token: contextvars.Token[Collector | None] | None = None

    def __enter__(self) -> Batch:
        if self.handle is not None or self._token is not None:
            raise ValidationError("batch", "a batch is used once")
        self._token = current_batch.set(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._token is not None
        current_batch.reset(self._token)
        if exc_type is None:
            self.handle = self._store()

    async def __aenter__(self) -> Batch:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """``__exit__`` with the store on a worker thread (never blocks the event loop)."""
        assert self._token is not None
        current_batch.reset(self._token)
        if exc_type is None:
            self.handle = await asyncio.to_thread(self._store)

    def collect(self, runtime: Any, jobs: list[Any], connection: Any = None) -> list[Any] | None:
        """Keep ``jobs`` for the end of the block (None: not this batch's app). Jobs meant for
        the caller's transaction join only a batch stored in that transaction."""
        if runtime is not self._rt:
            return None
        if connection is not None:
            self._check_connection(connection)
        for job in jobs:
            if job.idempotency_key:
                raise ValidationError("idempotency_key", "jobs of a batch cannot have one")
        self.jobs.extend(jobs)
        return jobs

    def _check_connection(self, connection: Any) -> None:
        """A ``connection=`` job joins only a batch stored in that same transaction."""
        from ..txn import raw_connection

        if self.connection is None:
            raise ValidationError(
                "connection",
                "this job would join the open app.batch(...), which the broker stores when its"
                " block ends, outside your transaction: open it as app.batch(...,"
                " connection=conn) to store the whole batch in the transaction, or enqueue"
                " this job outside the batch block",
            )
        if raw_connection(connection) is not raw_connection(self.connection):
            raise ValidationError(
                "connection",
                "differs from the one of the open app.batch(..., connection=...): a batch is"
                " stored in one transaction",
            )

    def _store(self) -> WorkflowHandle:
        from .build import Builder

        b = Builder(self._rt, self.id, self.name or "batch", "continue")
        for job in self.jobs:
            job.metadata = {**job.metadata, "workflow": {"id": self.id, "name": b.name}}
            b.jobs.append(job)
            b.nodes.append(FlowNode(job.id, self.id, 0))
        ids = [job.id for job in self.jobs]
        sinks = []
        if (sig := self.callbacks["on_complete"]) is not None:
            sinks.append(_add(b, sig, ids, "all_done"))
        if (sig := self.callbacks["on_success"]) is not None:
            with b.edge_policy("fail"):
                sinks.append(_add(b, sig, ids, "all_done"))
        if self.on_failure is not None and ids:
            sinks.append(_add(b, self.on_failure, ids, "one_failed"))
        return b.store(sinks or ids, self.connection)

    def status(self) -> dict[str, int]:
        """``total``, ``pending`` (not finished), ``completed`` and ``failed`` (dead letter,
        cancelled or expired: ``on_failure`` runs) of the batch's own jobs (callbacks not
        counted). A job retention dropped (it had finished) counts as none of the three."""
        if self.handle is None:
            return {"total": len(self.jobs), "pending": len(self.jobs), "completed": 0, "failed": 0}
        mine = {job.id for job in self.jobs}
        states = Counter(j.state for j in self.handle.jobs() if j.id in mine)
        done = states[JobState.COMPLETED]
        failed = sum(states[s] for s in _FAILED)
        return {
            "total": len(self.jobs),
            "pending": sum(n for s, n in states.items() if s not in TERMINAL_STATES),
            "completed": done,
            "failed": failed,
        }


def _add(b: Any, sig: Signature | Spec | JobSpec, after: list[str], trigger: Any) -> str:
    """A callback node (it gets no results: a batch may hold thousands of jobs, so a
    ``.s()`` callback needs all its arguments; ``steps.spec_mode`` says so clearly)."""
    if isinstance(sig, Spec):
        sig = sig.spec
    if isinstance(sig, JobSpec):
        return str(b.add_spec(sig, after, "none", trigger))
    return str(b.add(sig, after, "none", trigger))


def _check_transactional(runtime: FlowHost) -> None:
    """Refuse ``app.batch(connection=...)`` where a batch cannot be stored in the caller's
    transaction: the outbox (Redis) relays single jobs; SQLite and PostgreSQL store a graph
    in it."""
    broker = runtime.broker
    outbox = getattr(runtime.producer, "transactional", None) is not None
    if outbox or not getattr(broker, "workflows_in_transaction", False):
        raise ValidationError(
            "connection",
            f"the {type(broker).__name__} backend cannot store a batch inside your transaction"
            " (SQLite and PostgreSQL can): open app.batch(...) without connection= and"
            " enqueue it after your transaction commits",
        )
