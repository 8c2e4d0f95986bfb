"""The values the Broker protocol passes: event types, enqueue results, leases, acks, search pages.

Split out of ``broker/base.py`` (which re-exports every name here): plain data, no behaviour
beyond building itself. ``Lease.fast`` and ``Ack.fast`` skip the frozen dataclass ``__init__``
because brokers and the worker build one per job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..core.job import Job
from ..core.state import JobState

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

    ``next_due`` is set on an empty claim: the earliest run_at of a scheduled or
    retry_scheduled job, or lease deadline, in the queues read (paused ones excluded); None when
    there is none. The claim loop waits ``min(poll_interval, next_due - now)`` for work.

    ``drained`` (issue 18): the claim came back short (fewer leases than its ``limit``) because
    the queues had nothing more ready, and ``next_due`` is set as for an empty claim. The claim
    loop then waits for work at once instead of claiming again (that claim would almost always
    be empty: on a sharded queue one call per shard). A broker that does not say so (False, the
    default) gets the loop's old behaviour: claim again until a claim is empty.
    """

    next_due: float | None = None
    drained: bool = False

    @classmethod
    def of(cls, leases: list[Lease], next_due: float | None, *, limit: int = 0) -> Claimed:
        """The leases, with ``next_due`` kept only when there are none, or (given the claim's
        ``limit``) when there are fewer than ``limit``: then the claim is ``drained``."""
        out = cls(leases)
        if not leases:
            out.next_due = next_due
            out.drained = limit > 0
        elif len(leases) < limit:
            out.next_due, out.drained = next_due, True
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
