"""User-facing handles: ``JobHandle`` (a Job snapshot that can refresh) and ``Delivery``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from .broker.base import Ack, Broker, Lease
from .config import Settings
from .core.job import Job
from .core.serialization import result_problem
from .core.state import JobState
from .errors import JobNotFound, LeaseLost, ValidationError


class Backing(Protocol):
    """What a handle uses of its app (``conveyor.runtime.Runtime`` is one)."""

    broker: Broker
    settings: Settings

    def now(self) -> float:
        """The current time."""
        ...


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))


@dataclass
class JobHandle(Job):
    """A snapshot of a job bound to its app: ``refresh()`` re-reads it from the broker."""

    duplicate: bool = False
    _app: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def bind(cls, job: Job, app: Backing, duplicate: bool = False) -> JobHandle:
        """Wrap a broker snapshot."""
        # a shallow copy of the fields, without __init__'s overhead
        return cls.fast({**job.__dict__, "duplicate": duplicate, "_app": app})

    def refresh(self) -> JobHandle:
        """Re-read every field from the broker (in place) and return self."""
        fresh = self._app.broker.get(self.id)
        if fresh is None:
            raise JobNotFound(self.id)
        for name in _JOB_FIELDS:
            setattr(self, name, getattr(fresh, name))
        return self

    @property
    def progress(self) -> dict[str, Any] | None:
        """The job's last ``current_job().progress()`` report (``fraction``, ``message``,
        ``attempt``, ``at``), read from the broker on each access; None before any (issue 16)."""
        from .broker.jobdocs import read_progress

        return read_progress(self._app.broker, self.id, self._app.now())


class Delivery:
    """A low-level leased job (SQS style): ``ack()``, ``nack(delay)``, ``extend(seconds)``."""

    def __init__(self, app: Backing, lease: Lease, visibility_timeout: float) -> None:
        self._app = app
        self._lease = lease
        self.visibility_timeout = visibility_timeout
        self.job = JobHandle.bind(lease.job, app)

    @property
    def id(self) -> str:
        """The job id."""
        return self._lease.job.id

    @property
    def token(self) -> str:
        """The fencing token of this delivery."""
        return self._lease.token

    @property
    def delivery_count(self) -> int:
        """How many times this job has been delivered (its ``attempts``)."""
        return self._lease.job.attempts

    def ack(self, result: Any = None) -> None:
        """Mark the job completed; raise ``LeaseLost`` if the lease expired meanwhile.

        A ``result`` that cannot be stored (not JSON, over ``max_result_bytes``) raises
        ``ValidationError`` and changes nothing: the lease is still yours to ack again.
        """
        problem = result_problem(result, self._app.settings.max_result_bytes)
        if problem is not None:
            field, _, rule = problem.partition(": ")
            raise ValidationError(field, rule)
        ack = Ack(self.id, self.token, result, self._lease.job.queue)
        if not self._app.broker.complete([ack], self._app.now())[0]:
            raise LeaseLost(self.id)

    def nack(self, delay: float = 0.0) -> JobState:
        """Give the job back, visible again after ``delay`` seconds (counts as a delivery)."""
        return self._app.broker.release(
            self.id, self.token, self._app.now(), delay=delay, penalize=True, note="nack"
        )

    def fail(self, message: str, *, retry_at: float | None = None) -> JobState:
        """Record a failure: retry at ``retry_at`` or dead-letter when None."""
        error = {"kind": "error", "type": "", "message": message, "at": self._app.now()}
        return self._app.broker.fail(
            self.id, self.token, self._app.now(), error=error, retry_at=retry_at
        )

    def extend(self, seconds: float | None = None) -> None:
        """Push the lease deadline to now + ``seconds``; raise ``LeaseLost`` if it is gone."""
        vt = self.visibility_timeout if seconds is None else seconds
        if not self._app.broker.extend([(self.id, self.token)], self._app.now(), vt)[0]:
            raise LeaseLost(self.id)
