"""The Broker protocol: the ONLY storage surface workers, schedulers and the app see.

Protocols of one screen each: ``JobReads`` (read-only views), ``JobAdmin`` (operator actions),
``JobStore`` (transitions and lifecycle, plus both) and ``Broker`` = a ``JobStore`` composed with
the side stores of ``broker.side`` (documents, logs, events, counters), which each backend builds
as separate objects.

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
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..core.job import Job
from ..core.state import JobState
from ..errors import ValidationError
from .flowstore import WorkflowStore
from .side import CounterStore, DocStore, EventStore, LogStore
from .waits import JobWaits

EVENT_TYPES = (
    "enqueued",
    "started",
    "completed",
    "failed",
    "retry_scheduled",
    "dead_lettered",
    "cancelled",
    "requeued",
    "released",
    "lease_lost",
    "worker_up",
    "worker_down",
    "expired",  # issue 15: not started before its expires_at
)


#: Backends that enforce flow control (issue 15: ``flow`` records of jobs) set
#: ``supports_flow = True`` on their class; the producer refuses such jobs elsewhere.
SUPPORTS_FLOW_ATTRIBUTE = "supports_flow"


class EnqueueResult(NamedTuple):
    """Outcome of storing one job: its id, and whether an idempotency key matched.

    A named tuple (immutable, about 5x cheaper to build than a frozen dataclass: one per
    enqueued job).
    """

    id: str
    duplicate: bool
    state: JobState


@dataclass(frozen=True)
class Lease:
    """A claimed job: the snapshot after claiming, and the fencing token of this attempt."""

    job: Job
    token: str
    expires_at: float

    @property
    def id(self) -> str:
        """The job id."""
        return self.job.id

    @classmethod
    def fast(cls, job: Job, token: str, expires_at: float) -> Lease:
        """``Lease(job, token, expires_at)`` without the frozen dataclass ``__init__`` (one
        ``object.__setattr__`` per field): brokers build one per claimed job."""
        lease = _new_object(cls)
        _set_attribute(lease, "__dict__", {"job": job, "token": token, "expires_at": expires_at})
        return lease


_new_object = object.__new__
_set_attribute = object.__setattr__  # the way past a frozen dataclass's __setattr__


class Claimed(list[Lease]):
    """What ``Broker.claim`` returns: the leases (a plain list to every caller) and ``next_due``.

    ``next_due`` is set only on an empty claim: the earliest run_at of a scheduled or
    retry_scheduled job, or lease deadline, in the queues read (paused ones excluded); None when
    there is none. The claim loop waits ``min(poll_interval, next_due - now)`` for work.
    """

    next_due: float | None = None

    @classmethod
    def of(cls, leases: list[Lease], next_due: float | None) -> Claimed:
        """The leases, with ``next_due`` kept only when there are none."""
        out = cls(leases)
        if not leases:
            out.next_due = next_due
        return out


@dataclass(frozen=True)
class Ack:
    """One successful completion to record: coalesced into ``Broker.complete`` batches."""

    job_id: str
    token: str
    result: Any = None
    queue: str = ""
    #: an ``errors`` entry to append while completing (kind ``result_error``: the handler's
    #: return value could not be stored, so ``result`` is None); it also sets ``last_error``
    error: Mapping[str, Any] | None = None

    @classmethod
    def fast(cls, job_id: str, token: str, result: Any, queue: str) -> Ack:
        """``Ack(job_id, token, result, queue)`` (no ``error``) without the frozen dataclass
        ``__init__``: the worker builds one per completed job."""
        ack = _new_object(cls)
        _set_attribute(
            ack,
            "__dict__",
            {"job_id": job_id, "token": token, "result": result, "queue": queue, "error": None},
        )
        return ack


@dataclass(frozen=True)
class SearchQuery:
    """Filters for ``Broker.search``; None means "any". Results are newest first."""

    id: str | None = None
    state: JobState | None = None
    task: str | None = None
    queue: str | None = None
    since: float | None = None  # created_at >= since
    until: float | None = None  # created_at < until
    error: str | None = None  # substring of last_error (error type or message)
    text: str | None = None  # substring of the encoded args/kwargs
    page: int = 1
    page_size: int = 50


@dataclass(frozen=True)
class Page:
    """One page of search results."""

    items: list[Job]
    total: int
    page: int
    page_size: int
    pages: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pages", max(1, math.ceil(self.total / max(1, self.page_size))))


class JobReads(abc.ABC):
    """Read-only views of jobs and queues (inspector, dashboard, CLI)."""

    @abc.abstractmethod
    def get(self, job_id: str) -> Job | None:
        """A fresh snapshot of the job, or None."""

    # -------------------------------------------------------- flow control (issue 15)
    def replace_waiting(self, job_id: str, job: Job, now: float) -> bool:
        """``debounce``: a job that still waits takes ``job``'s arguments (and metadata); a
        scheduled one also its ``run_at`` (its delay restarts). False when it no longer waits."""
        raise ValidationError("debounce", f"{type(self).__name__} cannot replace waiting jobs")

    def flow_set_limit(self, name: str, spec: list[float] | None) -> None:
        """Override a limiter's limit at run time (``[tokens, per, burst]`` or ``[n]``; None
        clears); workers pick it up on their next claim. Backends with ``supports_flow``."""
        raise ValidationError("limits", f"{type(self).__name__} has no flow control")

    def flow_status(self, now: float) -> dict[str, Any]:
        """``limits`` (run-time overrides), ``buckets`` (tokens), ``running`` (job ids per
        slot), ``groups`` (queue, group, waiting, why) of flow control."""
        return {"limits": {}, "buckets": {}, "running": {}, "groups": []}

    @abc.abstractmethod
    def paused_queues(self) -> set[str]:
        """Names of paused queues."""

    @abc.abstractmethod
    def queues(self) -> list[str]:
        """Every queue that has ever held a job (or is paused), sorted."""

    @abc.abstractmethod
    def counts(self) -> dict[str, dict[str, int]]:
        """Per queue, the number of jobs in each ``JobState`` (all states present)."""

    @abc.abstractmethod
    def peek(self, queue: str, n: int = 10) -> list[Job]:
        """The next ``n`` ready jobs of ``queue`` in claim order, without claiming them."""

    @abc.abstractmethod
    def search(self, query: SearchQuery) -> Page:
        """Jobs matching every given filter, newest first, one page."""

    @abc.abstractmethod
    def oldest_pending(self, queue: str) -> float | None:
        """The ready time (run_at, or created_at) of the oldest pending job of ``queue``."""


class JobAdmin(abc.ABC):
    """Operator actions on jobs and queues (CLI, dashboard, ``Conveyor`` admin methods)."""

    @abc.abstractmethod
    def cancel(self, job_id: str, now: float) -> bool:
        """Cancel a job that has not started (scheduled/pending/retry_scheduled)."""

    @abc.abstractmethod
    def requeue(self, job_id: str, now: float) -> bool:
        """Revive a dead_letter or cancelled job: pending now, attempts and lost reset to 0.

        Errors are kept; the requeue is recorded in the history.
        """

    @abc.abstractmethod
    def purge(
        self,
        now: float,
        *,
        state: JobState = JobState.DEAD_LETTER,
        older_than: float | None = None,
        queue: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete terminal jobs in ``state`` finished more than ``older_than`` s ago."""

    @abc.abstractmethod
    def clear_queue(self, queue: str, now: float) -> int:
        """Delete every waiting job of ``queue`` (pending, scheduled, retry_scheduled) in one
        atomic step per batch; returns how many. Active jobs keep their lease and finished
        jobs stay: a job claimed before the clear is never touched by it."""

    @abc.abstractmethod
    def run_now(self, job_id: str, now: float) -> bool:
        """Make a scheduled or retry_scheduled job due now: pending, ``run_at = now``.

        Attempts, errors and history are kept; False (nothing changed) in any other state.
        """

    @abc.abstractmethod
    def delete_job(self, job_id: str, now: float) -> bool:
        """Delete one job that is not running (any state but active), for good.

        False when the job does not exist or is active (a running job cannot be deleted).
        """

    @abc.abstractmethod
    def pause(self, queue: str) -> None:
        """Stop handing out jobs of ``queue`` (running jobs finish)."""

    @abc.abstractmethod
    def resume(self, queue: str) -> None:
        """Undo ``pause``."""


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
