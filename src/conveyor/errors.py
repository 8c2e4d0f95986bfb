"""Exception hierarchy: one root, ConveyorError; validation, broker and control-flow errors.

Two families live here:

* errors Conveyor raises to callers (``ValidationError``, ``PayloadTooLarge``, ``UnknownTask``,
  ``LeaseLost``, ``BrokerUnavailable`` (transient), ``StorageFull``, ``BrokerConfigError`` and
  its ``BrokerAuthError`` (permanent: fix the configuration), ``IllegalTransition``,
  ``DuplicateJob``, and ``JobFailed`` / ``WaitTimeout`` from ``handle.wait()``);
* exceptions a *handler* raises to steer the retry policy (``Retry``, ``PermanentError``).
"""

from __future__ import annotations

from numbers import Real
from typing import Any


def rebuild_exception(
    cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
) -> Any:
    """Unpickle an exception without calling its ``__init__`` (whose signature is not its
    ``args``): a process-pool child sends a job's exception back to the worker this way."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class _Restorable(Exception):
    """Pickles as its class, ``args`` and attributes, whatever its ``__init__`` takes."""

    def __reduce__(self) -> tuple[Any, ...]:
        """``rebuild_exception(type, args, attributes)``."""
        return (rebuild_exception, (type(self), self.args, dict(self.__dict__)))


class ConveyorError(_Restorable):
    """Root of every error Conveyor raises."""


class ValidationError(ConveyorError, ValueError):
    """Bad input: the message names the field and the rule it broke."""

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


class PayloadTooLarge(ValidationError):
    """An encoded job is over the size limit; raised before any broker call."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__("payload", f"encoded job is {size} bytes, the limit is {limit} bytes")


class UnknownTask(ConveyorError, LookupError):
    """A job names a task that this process has not registered."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown task {name!r}: register it with @app.task")


class DuplicateJob(ConveyorError):
    """A job with this explicit ``job_id`` already exists."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} already exists")


class JobNotFound(ConveyorError, LookupError):
    """No job with this id is stored (never existed, or purged by retention)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} not found")


class LeaseLost(ConveyorError):
    """The attempt's fencing token is stale: the job was redelivered or finished elsewhere."""

    def __init__(self, job_id: str, detail: str = "lease expired or token is stale") -> None:
        self.job_id = job_id
        super().__init__(f"lease lost for job {job_id!r}: {detail}")


class BrokerUnavailable(ConveyorError, ConnectionError):
    """The storage backend cannot be reached right now."""


class BrokerConfigError(ConveyorError):
    """The broker refuses this configuration (database index, permissions, ...).

    Not transient, so deliberately NOT a ``BrokerUnavailable`` / ``ConnectionError``: retrying
    cannot help. Workers exit with the message; producers get it raised at once.
    """


class BrokerAuthError(BrokerConfigError):
    """The broker rejected the credentials (wrong or missing password, ACL user, permissions)."""


class IllegalTransition(ConveyorError):
    """A state change that the transition table does not allow."""

    def __init__(self, state: str, event: str) -> None:
        self.state = state
        self.event = event
        super().__init__(f"event {event!r} is not allowed in state {state!r}")


class DecodeError(ConveyorError, ValueError):
    """Stored bytes are not a valid job envelope (bad JSON, version, or fields)."""


class PermanentError(Exception):
    """Raised by a handler: do not retry, move the job to the dead-letter queue now."""


class Retry(_Restorable):
    """Raised by a handler: retry after ``delay`` seconds (counts as an attempt).

    ``delay`` is None (the task's backoff) or a finite number of seconds (a negative one means
    at once); anything else raises ``ValidationError`` in the handler, so the attempt fails
    with a message naming ``delay`` instead of the job waiting for ever (infinity) or retrying
    at once (NaN).
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        if delay is not None and (
            isinstance(delay, bool)
            or not isinstance(delay, Real)  # numpy numbers too, as before
            or not -float("inf") < delay < float("inf")
        ):
            raise ValidationError(
                "delay", f"must be a finite number of seconds or None, got {delay!r}"
            )
        self.delay = None if delay is None else float(delay)
        self.reason = reason
        super().__init__(reason or f"retry requested (delay={delay})")


class RateLimited(Exception):
    """Raised by a handler: the service it calls said "too many requests" (issue 15).

    The job is rescheduled ``retry_after`` seconds later WITHOUT spending an attempt or counting
    a failure (no ``errors`` entry; a ``released`` history note says why).
    """

    def __init__(self, retry_after: float = 1.0, reason: str = "") -> None:
        if (
            isinstance(retry_after, bool)
            or not isinstance(retry_after, int | float)
            or not 0 <= retry_after < float("inf")
        ):
            raise ValidationError(
                "retry_after", f"must be a finite number >= 0, got {retry_after!r}"
            )
        self.retry_after = float(retry_after)
        self.reason = reason
        super().__init__(reason or f"rate limited (retry after {self.retry_after:g}s)")

    def __reduce__(self) -> tuple[type[RateLimited], tuple[float, str]]:
        """Pickles as itself (a process-pool child sends it back to the worker)."""
        return (RateLimited, (self.retry_after, self.reason))


class RemoteError(Exception):
    """A process-pool job's exception that could not come back from the child as itself (its
    class cannot be imported in the worker, or it cannot be pickled): ``type_name`` is its
    class's qualified name (``module.QualName``) and ``message`` its ``str()``, which the job's
    ``errors`` entry records in place of this class's."""

    def __init__(self, type_name: str, message: str, bases: tuple[str, ...] = ()) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        #: ``module.QualName`` of the original class and of each of its bases: the worker
        #: classifies by them (a ``PermanentError`` subclass stays permanent, ``dead_on``
        #: names match)
        self.bases = bases

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles with its fields (its ``args`` hold one string)."""
        return (type(self), (self.type_name, self.message, self.bases))


class JobTimeout(Exception):
    """Raised inside a job (or recorded for it) when it runs past its timeout."""


class JobCancelled(Exception):
    """Raised inside a running thread job an operator cancelled (``app.cancel``); the job ends
    ``cancelled`` and is never retried (``worker/cancel.py``)."""


# ---------------------------------------------------------------------- storage refusals (issue 13)
class StorageFull(ConveyorError):
    """The backend refuses writes for lack of room: Redis out of memory (``maxmemory`` with
    ``noeviction``), a full disk, or a read-only database file.

    Not a ``BrokerUnavailable``: retrying at once does not help; free memory or disk space (let
    workers drain, raise ``maxmemory``, fix the file's permissions). Workers still retry their
    own writes while their leases last, since draining frees room.
    """


# ------------------------------------------------------------ waiting for a result (issue 19)
class JobFailed(ConveyorError):
    """``handle.wait()`` on a job that ended without a result: dead-lettered (its attempts
    failed, or it failed permanently), cancelled, or completed without a storable result.

    ``job`` is the final snapshot; ``state`` its state; ``error`` its last error entry (kind,
    type, message, traceback) or None; the message carries the job's ``last_error``.
    """

    def __init__(self, job: Any, state: str, error: dict[str, Any] | None) -> None:
        self.job = job
        self.state = state
        self.error = error
        job_id = getattr(job, "id", "?")
        task = getattr(job, "task", "?")
        detail = getattr(job, "last_error", None) or "no error recorded"
        super().__init__(f"job {job_id!r} ({task}) ended {state}: {detail}")


class WaitTimeout(ConveyorError, TimeoutError):
    """``handle.wait(timeout=...)`` ran out before the job finished (the job goes on)."""

    def __init__(self, job_id: str, timeout: float, state: str) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.state = state
        super().__init__(f"job {job_id!r} not finished after {timeout:g}s (state {state})")
