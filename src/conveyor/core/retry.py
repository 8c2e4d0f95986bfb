"""The retry decision: given a failed attempt, retry (when) or dead-letter (why). Pure."""

from __future__ import annotations

import random
import traceback as tb
from asyncio import CancelledError
from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Real

from ..errors import JobTimeout, PermanentError, RateLimited, RemoteError, Retry
from .backoff import DEFAULT_BACKOFF, Backoff
from .job import MAX_DELAY, ErrorKind, Job, exception_name


@dataclass(frozen=True)
class RetryPolicy:
    """Per-task failure classification and backoff (max_attempts, retry_on and dead_on are
    overridable per job)."""

    max_attempts: int = 4
    backoff: Backoff = DEFAULT_BACKOFF
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    dead_on: tuple[type[BaseException], ...] = field(default=(PermanentError,))


@dataclass(frozen=True)
class Decision:
    """What to do after a failed attempt: ``retry_at`` is None when the job goes dead."""

    kind: ErrorKind
    retry_at: float | None
    exc_type: str
    message: str
    traceback: str

    @property
    def dead(self) -> bool:
        """True when the job must go to the dead-letter queue."""
        return self.retry_at is None


def classify(
    exc: BaseException,
    policy: RetryPolicy,
    retry_on: Sequence[str] | None = None,
    dead_on: Sequence[str] | None = None,
) -> ErrorKind:
    """Map an exception to an error kind under ``policy`` (permanent kinds never retry).

    ``retry_on`` / ``dead_on``: the job's own overrides, as qualified class names (None: the
    policy's types). A name matches when it names the exception's class or any base class.
    """
    if isinstance(exc, Retry):
        return ErrorKind.RETRY
    if isinstance(exc, RateLimited):
        return ErrorKind.RATE_LIMITED
    if isinstance(exc, JobTimeout):
        return ErrorKind.TIMEOUT
    if _is(exc, (PermanentError,)):
        return ErrorKind.PERMANENT
    if (dead_on is None and _is(exc, policy.dead_on)) or (dead_on and _named(exc, dead_on)):
        return ErrorKind.PERMANENT
    if isinstance(exc, SystemExit):  # a job calling sys.exit() failed; it must not stop anything
        return ErrorKind.ERROR
    retryable = _is(exc, policy.retry_on) if retry_on is None else _named(exc, retry_on)
    if not retryable and isinstance(exc, CancelledError):
        retryable = _cancelled_retryable(policy, retry_on)
    return ErrorKind.ERROR if retryable else ErrorKind.PERMANENT


def _cancelled_retryable(policy: RetryPolicy, retry_on: Sequence[str] | None) -> bool:
    """Whether a ``CancelledError`` that reached ``classify`` is retried: as an ``Exception``.

    Real cancellations never get here (an operator's cancel is recorded ``cancelled``, a
    deadline ``timeout``, a shutdown releases the job): this one came from the job's own code,
    a future it awaited that something else cancelled. It is a ``BaseException`` only so that
    ``except Exception`` does not swallow a cancellation (it was an ``Exception`` before Python
    3.8); for the job it is an ordinary failure, retried when ``retry_on`` covers ``Exception``
    (the default) as Celery retries a failed task and Oban an errored job.
    """
    if retry_on is None:
        return issubclass(Exception, policy.retry_on)
    return exception_name(Exception) in retry_on


def _is(exc: BaseException, classes: tuple[type[BaseException], ...]) -> bool:
    """``isinstance(exc, classes)``; for a ``RemoteError`` that carries its original class's
    bases (a process-pool exception the worker could not rebuild), by their names."""
    if isinstance(exc, RemoteError) and exc.bases:
        return any(exception_name(cls) in exc.bases for cls in classes)
    return isinstance(exc, classes)


def _named(exc: BaseException, names: Sequence[str]) -> bool:
    """True when ``exc``'s class or one of its bases is in ``names`` (``module.QualName``;
    a ``RemoteError``: its original class's)."""
    if isinstance(exc, RemoteError) and exc.bases:
        return any(name in names for name in exc.bases)
    return any(
        exception_name(cls) in names
        for cls in type(exc).__mro__
        if isinstance(cls, type) and issubclass(cls, BaseException)
    )


def decide(
    exc: BaseException,
    *,
    attempts: int,
    max_attempts: int,
    policy: RetryPolicy,
    now: float,
    rng: random.Random,
    previous_delay: float | None = None,
    retry_on: Sequence[str] | None = None,
    dead_on: Sequence[str] | None = None,
) -> Decision:
    """Decide the fate of the attempt number ``attempts`` that raised ``exc`` at ``now``.

    ``previous_delay``: the backoff the job waited before this attempt (see ``previous_delay``);
    the decorrelated strategy grows from it. ``retry_on`` / ``dead_on``: the job's overrides.
    """
    kind = classify(exc, policy, retry_on, dead_on)
    trace = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
    message = describe(exc)
    exc_type = type(exc).__name__
    if isinstance(exc, RemoteError):  # one from a process-pool child: record the original
        exc_type, message = exc.type_name, exc.message
    retry_at: float | None = None
    if isinstance(exc, RateLimited):  # not a failure: always back after retry_after
        after = _seconds(getattr(exc, "retry_after", None))
        return Decision(
            kind, now + (1.0 if after is None else after), type(exc).__name__, message, ""
        )
    if kind is not ErrorKind.PERMANENT and attempts < max_attempts:
        delay = _seconds(getattr(exc, "delay", None)) if isinstance(exc, Retry) else None
        if delay is not None:
            retry_at = now + delay
        else:
            retry_at = now + policy.backoff.delay(attempts, rng, previous_delay)
    return Decision(kind, retry_at, exc_type, message, trace)


def describe(exc: BaseException) -> str:
    """``str(exc)``, or the class name when it is empty; never raises (a handler's exception
    whose ``__str__`` fails is still recorded, with a note saying so)."""
    try:
        text = str(exc)
    except Exception as failed:
        return f"<str() failed: {type(failed).__name__}>"
    return text if isinstance(text, str) and text else type(exc).__name__


def _seconds(value: object) -> float | None:
    """A delay the handler set (``Retry.delay``, ``RateLimited.retry_after``) as seconds >= 0;
    None when missing or not a finite number (a subclass that skipped ``__init__`` or set the
    attribute afterwards): the caller's default applies."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    seconds = float(value)
    if not -float("inf") < seconds < float("inf"):
        return None
    return min(max(0.0, seconds), MAX_DELAY)  # set after __init__: capped, as __init__ refuses


def previous_delay(job: Job) -> float | None:
    """The backoff delay the job waited before its current attempt, from its stored history.

    A retry sets ``run_at = failed_at + delay`` and nothing else moves ``run_at`` until the job is
    claimed again, so when the latest ``errors`` entry is a backed-off failure (kind ``error`` or
    ``timeout``) the delay is ``run_at - entry["at"]``. Anything else in between (a lost lease,
    a release, a requeue) restarts the chain: None, which the strategy reads as ``base``.
    """
    if not job.errors:
        return None
    last = job.errors[-1]
    at = last.get("at")
    backed_off = last.get("kind") in (ErrorKind.ERROR, ErrorKind.TIMEOUT)
    if not backed_off or isinstance(at, bool) or not isinstance(at, float | int):
        return None
    if job.history and job.history[-1].get("at", 0) >= at:  # released/requeued since: run_at moved
        return None
    delay = float(job.run_at) - float(at)
    return delay if delay > 0 else None


def max_attempts_from(max_attempts: int | None, max_retries: int | None) -> int | None:
    """Resolve the ``max_retries`` synonym: ``max_retries=N`` means ``max_attempts=N+1``."""
    if max_retries is not None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            from ..errors import ValidationError

            raise ValidationError("max_retries", f"must be an integer >= 0, got {max_retries!r}")
        return max_retries + 1
    return max_attempts
