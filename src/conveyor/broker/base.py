"""The Broker protocol: the ONLY storage surface workers, schedulers and the app see.

Protocols of one screen each: ``JobReads`` (read-only views), ``JobAdmin`` (operator actions),
``JobStore`` (transitions and lifecycle, plus both) and ``Broker`` = a ``JobStore`` composed with
the side stores of ``broker.side`` (documents, logs, events, counters), which each backend builds
as separate objects. The values passed (``Lease``, ``Ack``, ``Claimed``, ``EnqueueResult``,
``SearchQuery``, ``Page``, ``EVENT_TYPES``) live in ``broker/records.py``, ``JobReads`` and
``JobAdmin`` in ``broker/jobviews.py``; this module re-exports them all.

Rules every backend obeys (the contract suite in tests/contract is the referee):

* Time is an argument (``now``, epoch seconds) — never read inside a broker — so FakeClock tests
  are exact. (Redis callers default to a clock synced to the server's ``TIME``.)
* Every state change follows ``core.state.TRANSITIONS`` and is atomic.
* ``claim`` moves ready jobs to ``active`` in ONE atomic step: state, ``attempts += 1``, lease
  deadline ``now + visibility_timeout``, a fresh fencing token, ``started_at``, ``worker_id``.
  Before claiming it promotes the due scheduled / retry jobs of the queues it reads and returns
  their expired leases to ``pending`` exactly as ``reap_expired`` does (``lost += 1``; the
  ``max_lost``-th loss dead-letters the job as ``worker_lost``): an expired lease is claimable by
  the very next claim (SQS semantics), not only after a reaper pass. SQLite and memory do both
  for every queue (as their reaper does), Redis for the queues it reads.
  An empty claim reports ``Claimed.next_due``: the earliest time something in the (not paused)
  queues it read becomes claimable — a scheduled / retry run_at or a lease deadline — so an
  idle worker sleeps exactly until then (BullMQ's moveToActive returns the same).
  Order: lower ``priority`` first, FIFO (order of becoming ready) within a priority.
  Paused queues are skipped. Queues are served in the order given (the caller rotates them for
  weighted fairness).
* ``complete`` / ``fail`` / ``release`` / ``extend`` present the token; a stale token changes
  nothing (``complete`` and ``extend`` report False per item, the others raise ``LeaseLost``).
* Idempotency keys are scoped per queue and expire after the job's ``idempotency_ttl``.
* ``claim`` never returns a job it cannot decode (bad JSON, wrong envelope version, missing
  fields): it moves it to ``dead_letter`` with an error of kind ``decode_error`` and goes on.
* Retention (``config.Retention``): completed jobs are dropped past ``completed_ttl`` or beyond
  ``completed_max`` per queue; dead letters beyond ``dead_letter_max`` per queue; idempotency
  keys expire. Housekeeping may run inside ``reap_expired``.
* Every transition appends an event (``{"type", "job_id", "queue", "task", "at", ...}``) to a
  bounded stream readable with ``events_read``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.job import Job
from ..core.state import JobState
from ..errors import ValidationError
from .flowstore import WorkflowStore
from .jobviews import JobAdmin, JobReads
from .records import (
    EVENT_TYPES,
    SUPPORTS_FLOW_ATTRIBUTE,
    Ack,
    Claimed,
    EnqueueResult,
    Lease,
    Page,
    SearchQuery,
)
from .side import CounterStore, DocStore, EventStore, LogStore
from .waits import JobWaits

__all__ = [  # the values and half-protocols live in records.py / jobviews.py: one import path
    "EVENT_TYPES",
    "SUPPORTS_FLOW_ATTRIBUTE",
    "Ack",
    "Broker",
    "Claimed",
    "EnqueueResult",
    "JobAdmin",
    "JobReads",
    "JobStore",
    "Lease",
    "Page",
    "SearchQuery",
]


class JobStore(JobReads, JobAdmin, JobWaits, WorkflowStore):
    """Job transitions and lifecycle (plus reads and admin): what producers, workers and the
    promote / reap duties call."""

    url: str = ""
    #: True when the backend's own clock should be authoritative (Redis ``TIME``).
    has_server_clock: bool = False

    # ----------------------------------------------------------------- producers
    @abc.abstractmethod
    def enqueue(
        self,
        jobs: Sequence[Job],
        now: float,
        payloads: Sequence[bytes] | None = None,
        *,
        fresh_ids: bool = False,
    ) -> list[EnqueueResult]:
        """Store new jobs atomically (all or none), in order.

        Each job arrives fully built (id, state ``pending`` or ``scheduled``, run_at,
        created_at). A job whose ``idempotency_key`` matches a live key of the same queue is not
        stored: its result carries the existing id and ``duplicate=True``. An explicit id that
        already exists raises ``DuplicateJob`` and nothing of the batch is stored.
        ``payloads``, when given, are the jobs' envelopes already encoded by the caller with
        ``core.serialization.encode_envelope`` (one per job, validated and size-checked): a
        backend stores them instead of encoding each job again. ``fresh_ids=True`` promises that
        every id was just minted by ``new_ulid`` (the producer's plain path): a backend that must
        otherwise check ids across queues (Redis) may skip that check.
        """

    def enqueue_in_transaction(
        self,
        connection: Any,
        jobs: Sequence[Job],
        *,
        payloads: Sequence[bytes] | None = None,
    ) -> list[EnqueueResult]:
        """Store ``jobs`` with the caller's DB-API ``connection``, inside its open transaction.

        ``payloads``: the envelopes the producer already encoded, as for ``enqueue``.
        Same results as ``enqueue`` (``now`` is each job's ``created_at``): the jobs exist for
        workers only once the caller commits, never if it rolls back; a conflict (taken id)
        is raised after rolling back to a savepoint, so the caller's own work survives.
        Backends whose storage is not the caller's database refuse: by default this raises
        ``ValidationError`` naming ``connection`` and pointing to the outbox
        (``conveyor.outbox``, docs/transactions.md).
        """
        kind = type(self).__name__
        raise ValidationError(
            "connection",
            f"{kind} cannot enqueue inside your database transaction (its jobs live elsewhere);"
            " use the transactional outbox (conveyor.outbox.Outbox, docs/transactions.md)"
            " or enqueue after commit",
        )

    # ----------------------------------------------------------------- consumers
    @abc.abstractmethod
    def claim(
        self,
        queues: Sequence[str],
        now: float,
        *,
        limit: int = 1,
        visibility_timeout: float = 30.0,
        worker_id: str = "",
        max_lost: int = 3,
    ) -> Claimed:
        """Lease up to ``limit`` ready jobs from ``queues`` (in that order); see module rules.

        ``max_lost`` governs the expired leases this claim returns (as in ``reap_expired``).
        """

    @abc.abstractmethod
    def complete(self, acks: Sequence[Ack], now: float) -> list[bool]:
        """Mark each acked job ``completed`` with its result; False where the token is stale."""

    @abc.abstractmethod
    def fail(
        self,
        job_id: str,
        token: str,
        now: float,
        *,
        error: Mapping[str, Any],
        retry_at: float | None,
    ) -> JobState:
        """Record a failed attempt (``error`` is appended to ``errors``, sets ``last_error``).

        ``retry_at`` set → ``retry_scheduled`` until then; None → ``dead_letter``.
        Raises ``LeaseLost`` on a stale token. Returns the new state.
        """

    @abc.abstractmethod
    def release(
        self,
        job_id: str,
        token: str,
        now: float,
        *,
        delay: float = 0.0,
        penalize: bool = True,
        note: str = "released",
    ) -> JobState:
        """Give a leased job back: ``pending`` now, or ``scheduled`` after ``delay``.

        ``penalize=False`` (graceful shutdown) gives the attempt back (``attempts -= 1``).
        The release is recorded in the job's history. Raises ``LeaseLost`` on a stale token.
        """

    @abc.abstractmethod
    def extend(
        self, leases: Sequence[tuple[str, str]], now: float, visibility_timeout: float
    ) -> list[bool]:
        """Push the deadline of each (job_id, token) to ``now + visibility_timeout``.

        One call for all of a worker's in-flight jobs; False where the lease is lost.
        """

    def cancel_running(
        self, job_id: str, token: str, now: float, *, note: str = "cancelled while running"
    ) -> JobState:
        """Record that the lease holder stopped a job an operator cancelled: ``active`` →
        ``cancelled`` (event ``cancel_running``), lease dropped at once, never retried.

        Fenced like ``fail``: raises ``LeaseLost`` on a stale token or a job that is not
        active. The note goes to the job's history. (Not abstract: a backend written before
        issue 16 still loads; its workers then cannot cancel running jobs.)
        """
        raise NotImplementedError(f"{type(self).__name__} cannot cancel running jobs")

    # ----------------------------------------------------------------- maintenance
    @abc.abstractmethod
    def promote_due(self, now: float, limit: int = 1000) -> int:
        """Move scheduled / retry_scheduled jobs with ``run_at <= now`` to pending."""

    @abc.abstractmethod
    def reap_expired(self, now: float, *, max_lost: int = 3) -> int:
        """Return active jobs whose lease deadline passed to pending (``lost += 1``).

        The ``max_lost``-th loss sends the job to ``dead_letter`` with kind ``worker_lost``.
        Each loss appends a ``worker_lost`` error entry. Returns how many were reaped.
        """

    # ----------------------------------------------------------------- lifecycle
    def server_time(self) -> float | None:
        """The backend's own clock when it has one (Redis ``TIME``), else None."""
        return None

    def wait_for_work(self, queues: Sequence[str], timeout: float, *, due: bool = False) -> None:
        """Block up to ``timeout`` s or until a job may be ready in ``queues`` (default: sleep).

        Backends that can be woken return as soon as a job is enqueued, released, requeued or
        scheduled for a retry — a delayed one included, so the caller claims again and learns
        the new ``Claimed.next_due``. The claim loop passes ``min(poll_interval, next_due -
        now)``; ``due=True`` says the timeout ends at such a due time, which the backend must
        not overshoot by more than a few ms (Redis then finishes the wait with short polls).
        """
        import time

        time.sleep(timeout)

    @abc.abstractmethod
    def flush_all(self) -> None:
        """Delete everything this broker stores (tests, demos)."""

    def close(self) -> None:
        """Release connections and files."""


class Broker(JobStore):
    """A backend: a ``JobStore`` composed with its side stores (see ``broker.side``).

    Concrete: MemoryBroker, SqliteBroker, RedisBroker. Each builds ``docs``, ``logs``,
    ``events`` and ``counters`` in ``__init__`` from its own connection, so a ``Broker`` is also
    a ``side.SideStores``. The flat ``doc_*`` / ``log_*`` / ``events_*`` / ``counters_*``
    methods below are shorthands kept for existing code; new code calls the stores.
    """

    docs: DocStore
    logs: LogStore
    events: EventStore
    counters: CounterStore

    def doc_put(
        self,
        collection: str,
        name: str,
        doc: Mapping[str, Any],
        now: float,
        ttl: float | None = None,
    ) -> None:
        """``docs.put``."""
        self.docs.put(collection, name, doc, now, ttl)

    def doc_get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """``docs.get``."""
        return self.docs.get(collection, name, now)

    def doc_list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """``docs.list``."""
        return self.docs.list(collection, now)

    def doc_delete(self, collection: str, name: str) -> bool:
        """``docs.delete``."""
        return self.docs.delete(collection, name)

    def doc_update_if(
        self,
        collection: str,
        name: str,
        field: str,
        expected: Any,
        changes: Mapping[str, Any],
        now: float,
    ) -> bool:
        """``docs.update_if``."""
        return self.docs.update_if(collection, name, field, expected, changes, now)

    def log_append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """``logs.append``."""
        self.logs.append(name, entries, cap)

    def log_read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """``logs.read``."""
        return self.logs.read(name, limit)

    def events_add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """``events.add``."""
        self.events.add(events)

    def events_read(
        self, after: str | None = None, limit: int = 100
    ) -> tuple[list[dict[str, Any]], str]:
        """``events.read``."""
        return self.events.read(after, limit)

    def counters_add(
        self, bucket: str, increments: Mapping[str, float], now: float, ttl: float
    ) -> None:
        """``counters.add``."""
        self.counters.add(bucket, increments, now, ttl)

    def counters_get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """``counters.get``."""
        return self.counters.get(buckets, now)
