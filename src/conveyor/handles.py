"""User-facing handles: ``JobHandle`` (a Job snapshot that can refresh) and ``Delivery``."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from .broker.base import Ack, Broker, Lease
from .config import Settings
from .core.job import ErrorKind, Job, validate_duration
from .core.serialization import result_problem
from .core.state import JobState
from .errors import JobFailed, JobNotFound, LeaseLost, ValidationError, WaitTimeout
from .task_options import validate_time

R = TypeVar("R")


class Backing(Protocol):
    """What a handle uses of its app (``conveyor.runtime.Runtime`` is one)."""

    broker: Broker
    settings: Settings

    def now(self) -> float:
        """The current time."""
        ...


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))


@dataclass
class JobHandle(Job, Generic[R]):
    """A snapshot of a job bound to its app: ``refresh()`` re-reads it from the broker;
    ``wait()`` / ``wait_async()`` block until it finishes and return its result, typed ``R``
    when the handle came from a typed ``Task[P, R]``."""

    duplicate: bool = False
    _app: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def bind(cls, job: Job, app: Backing, duplicate: bool = False) -> JobHandle[Any]:
        """Wrap a broker snapshot."""
        # a shallow copy of the fields, without __init__'s overhead
        return cls.fast({**job.__dict__, "duplicate": duplicate, "_app": app})

    def refresh(self) -> JobHandle[R]:
        """Re-read every field from the broker (in place) and return self."""
        fresh = self._app.broker.get(self.id)
        if fresh is None:
            raise JobNotFound(self.id)
        self._take(fresh)
        return self

    def _take(self, fresh: Job) -> None:
        for name in _JOB_FIELDS:
            setattr(self, name, getattr(fresh, name))

    def wait(self, timeout: float | None = None) -> R:
        """Block until the job finishes; return its result (as stored: JSON and the typed
        extensions of docs/wire-format.md, so a tuple comes back as a list).

        Raises ``JobFailed`` (carrying the job and its last error) if it was dead-lettered or
        cancelled, or completed without a storable result; ``WaitTimeout`` (a
        ``TimeoutError``) after ``timeout`` seconds; ``JobNotFound`` if it is gone. Waiting
        uses the backend's wake-ups (memory: a condition; SQLite: ``data_version`` polled with
        a 2-50 ms backoff; Redis: the queue's event stream), not a fixed sleep loop. The
        handle's fields are refreshed in place.
        """
        limit = wait_limit(timeout)
        job = self._app.broker.watch(self.id, self.queue, limit)
        return self._settle(job, limit)

    async def wait_async(self, timeout: float | None = None) -> R:
        """``wait`` for async code: never blocks the event loop (Redis: the native async
        client; PostgreSQL: a future the "done" listener resolves; SQLite and memory: a worker
        thread, in slices of at most a second)."""
        limit = wait_limit(timeout)
        job = await self._app.broker.watch_async(self.id, self.queue, limit)
        return self._settle(job, limit)

    def _settle(self, job: Job | None, timeout: float) -> R:
        if job is None:
            raise JobNotFound(self.id)
        self._take(job)
        state = job.state
        if state is JobState.COMPLETED:
            last = job.errors[-1] if job.errors else None
            if last is not None and last.get("kind") == ErrorKind.RESULT_ERROR.value:
                raise JobFailed(job, "completed without its result", last)
            result: R = job.result
            return result
        if state in (JobState.DEAD_LETTER, JobState.CANCELLED):
            raise JobFailed(job, state.value, job.errors[-1] if job.errors else None)
        raise WaitTimeout(self.id, timeout, state.value)

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
        """Give the job back, visible again after ``delay`` seconds (counts as a delivery).

        ``delay``: finite seconds >= 0, else ``ValidationError`` (the lease is still yours)."""
        delay = validate_duration(delay, "delay")
        return self._app.broker.release(
            self.id, self.token, self._app.now(), delay=delay, penalize=True, note="nack"
        )

    def fail(self, message: str, *, retry_at: float | None = None) -> JobState:
        """Record a failure: retry at ``retry_at`` (epoch seconds) or dead-letter when None.

        A ``message`` that is not a string, or a ``retry_at`` that is not a finite number, is
        a ``ValidationError`` (the lease is still yours); lone surrogates in the message are
        stored escaped, as the worker stores a handler's error."""
        if not isinstance(message, str):
            raise ValidationError("message", f"must be a string, got {type(message).__name__}")
        if retry_at is not None:
            retry_at = validate_time(retry_at, "retry_at")
        text = _escaped(message[:2000])
        error = {"kind": "error", "type": "", "message": text, "at": self._app.now()}
        return self._app.broker.fail(
            self.id, self.token, self._app.now(), error=error, retry_at=retry_at
        )

    def extend(self, seconds: float | None = None) -> None:
        """Push the lease deadline to now + ``seconds``; raise ``LeaseLost`` if it is gone.

        ``seconds``: finite, > 0 and at most ``MAX_DELAY``, else ``ValidationError`` (a negative
        one expired the lease at once; 1e99 held the job for ever once its consumer died)."""
        vt = self.visibility_timeout if seconds is None else validate_duration(seconds, "seconds")
        if vt <= 0:
            raise ValidationError("seconds", f"must be > 0, got {seconds!r}")
        if not self._app.broker.extend([(self.id, self.token)], self._app.now(), vt)[0]:
            raise LeaseLost(self.id)


def _escaped(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udcff`` (storable as JSON)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def wait_limit(timeout: object) -> float:
    """``wait``'s ``timeout`` as seconds (``JobHandle`` and ``WorkflowHandle``): None is for
    ever, 0 looks once. NaN (which blocked for ever on some backends), a negative number, a
    bool (``wait(True)`` is a slip, not one second) or a non-number (``"5"`` included, as
    ``time.sleep`` refuses it) is a ``ValidationError`` naming ``timeout``."""
    if timeout is None:
        return float("inf")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise ValidationError(
            "timeout", f"must be a number of seconds or None, got {type(timeout).__name__}"
        )
    limit = float(timeout)
    if limit != limit or limit < 0:
        raise ValidationError("timeout", f"must be a number of seconds >= 0, got {limit!r}")
    return limit
