"""The Job record (what is stored) and the records that travel with it (errors, history)."""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from typing import Any, Self

from ..errors import ValidationError
from .state import JobState

# Every validation pattern ends in \Z, never $: "$" also matches before a final "\n", and a
# queue named "default\n" was accepted but never served (issue 13).
QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,100}\Z")
TASK_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(?:[.:][A-Za-z_][A-Za-z0-9_\-]*)*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_TASK_NAME = 200
MAX_ID = 200  # job ids and idempotency keys
MAX_ATTEMPTS_LIMIT = 1_000_000  # far beyond any retry policy; keeps the value a small integer
MAX_HISTORY = 50
DEFAULT_MAX_ATTEMPTS = 4
#: ``max_attempts`` of a job enqueued by name from a process that does not register its task
#: and did not pass ``max_attempts``: the worker applies the task's own (registered) value.
MAX_ATTEMPTS_UNSET = 0
DEFAULT_IDEMPOTENCY_TTL = 300.0


class ErrorKind(StrEnum):
    """Why an attempt ended badly; recorded in every ``errors`` entry."""

    ERROR = "error"  # handler raised a retryable exception
    PERMANENT = "permanent"  # PermanentError, dead_on, or outside retry_on
    RETRY = "retry"  # handler raised Retry(delay)
    TIMEOUT = "timeout"
    WORKER_LOST = "worker_lost"  # lease expired: the worker died or stalled
    DECODE_ERROR = "decode_error"  # stored bytes are not a valid envelope
    UNKNOWN_TASK = "unknown_task"
    BAD_ARGUMENTS = "bad_arguments"  # args do not fit the function's signature
    # the handler returned, but its value could not be stored (not JSON, too big): the job is
    # completed WITHOUT its result (its work happened; re-running it would repeat side effects)
    RESULT_ERROR = "result_error"
    # a workflow node never ran: a parent failed and the edge's policy is "fail the rest"
    UPSTREAM_FAILED = "upstream_failed"
    # the handler raised RateLimited: rescheduled, no attempt spent, never stored in ``errors``
    RATE_LIMITED = "rate_limited"


@dataclass
class Job:
    """One unit of work and everything known about it. Times are epoch seconds (float)."""

    id: str
    task: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    state: JobState = JobState.PENDING
    attempts: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # MAX_ATTEMPTS_UNSET (0): the task's own value
    timeout: float | None = None
    run_at: float = 0.0
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    result: Any = None
    last_error: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    idempotency_key: str | None = None
    idempotency_ttl: float = DEFAULT_IDEMPOTENCY_TTL
    metadata: dict[str, Any] = field(default_factory=dict)
    lost: int = 0
    worker_id: str | None = None
    lease_expires_at: float | None = None
    # Per-job failure classification, overriding the task's: qualified exception class names
    # ("module.QualName"); None means "the task's". Plain defaults (no factory) on purpose: a
    # Job built by assigning ``__dict__`` without these keys reads the class attribute, None.
    retry_on: list[str] | None = None
    dead_on: list[str] | None = None
    # issue 15: epoch seconds after which a job that has not started never runs (state expired)
    expires_at: float | None = None
    # issue 15: the limiters and group of a flow-controlled job (core/flow.py), None: none
    flow: dict[str, Any] | None = None

    @classmethod
    def fast(cls, values: dict[str, Any]) -> Self:
        """A Job (or ``JobHandle``) from ``values`` without ``__init__``: the one hot-path builder.

        Enqueue and claim build one Job per job; this skips the dataclass ``__init__`` (about
        twice the cost). ``values`` maps field names to values, taken as they are (no copies,
        no checks): it must hold every name in ``FAST_REQUIRED`` (the containers must be fresh
        objects the job may own); a field left out takes its default. A ``values`` that already
        holds every field (and nothing misspelt: tests/core/test_job_fast.py checks the callers)
        becomes the job's ``__dict__`` as it is.
        """
        defaults = _FAST_DEFAULTS.get(cls) or _fast_defaults(cls)
        job = _new_object(cls)
        job.__dict__ = values if len(values) == defaults[0] else {**defaults[1], **values}
        return job

    def record_error(
        self,
        *,
        kind: ErrorKind | str,
        message: str,
        at: float,
        exc_type: str = "",
        traceback: str = "",
        worker_id: str | None = None,
    ) -> dict[str, Any]:
        """Append an error entry for the current attempt and set ``last_error``."""
        entry: dict[str, Any] = {
            "attempt": self.attempts,
            "kind": str(kind),
            "type": exc_type,
            "message": message,
            "traceback": traceback[-4000:],
            "worker": worker_id,
            "at": at,
        }
        self.errors.append(entry)
        self.last_error = f"{exc_type}: {message}" if exc_type else message
        return entry

    def record_event(
        self, event: str, at: float, note: str = "", worker_id: str | None = None
    ) -> None:
        """Append an operational note (release, requeue, cancel) to the bounded history."""
        self.history.append(
            {"event": event, "at": at, "attempt": self.attempts, "note": note, "worker": worker_id}
        )
        del self.history[:-MAX_HISTORY]


_new_object = object.__new__
#: The fields ``Job.fast`` needs: no default (id, task) or a fresh container per job.
FAST_REQUIRED = ("id", "task", "args", "kwargs", "errors", "history", "metadata")
#: Per class: (number of fields, the other fields with their immutable defaults).
_FAST_DEFAULTS: dict[type, tuple[int, dict[str, Any]]] = {}


def _fast_defaults(cls: type[Job]) -> tuple[int, dict[str, Any]]:
    """The field count and plain defaults of ``cls`` (computed once per class)."""
    every = fields(cls)
    plain = {f.name: f.default for f in every if f.default is not MISSING}
    missing = {f.name for f in every} - set(plain) - set(FAST_REQUIRED)
    if missing:  # a new field with a default_factory must be listed in FAST_REQUIRED
        raise TypeError(f"Job.fast: fields {sorted(missing)} need a value per job")
    _FAST_DEFAULTS[cls] = found = (len(every), plain)
    return found


def validate_queue_name(queue: object, field_name: str = "queue") -> str:
    """Return ``queue`` if it is a legal queue name, else raise ``ValidationError``."""
    if not isinstance(queue, str) or not queue:
        raise ValidationError(field_name, "must be a non-empty string")
    if not QUEUE_NAME_RE.match(queue):
        raise ValidationError(
            field_name,
            f"{queue[:120]!r} must be 1-100 characters of letters, digits, '_', '-' or '.'"
            " (no spaces, braces or colons)",
        )
    return queue


def validate_task_name(name: object) -> str:
    """Return ``name`` if it is a legal task name (identifier segments), else raise."""
    if not isinstance(name, str) or not name:
        raise ValidationError("task", "must be a non-empty string")
    if len(name) > MAX_TASK_NAME or not TASK_NAME_RE.match(name):
        raise ValidationError(
            "task",
            f"{name[:120]!r} must be identifier segments joined by '.' or ':'"
            f" (at most {MAX_TASK_NAME} characters)",
        )
    return name


EXCEPTION_NAME_RE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|<locals>))*\.[A-Za-z_][A-Za-z0-9_]*"
)
MAX_EXCEPTION_NAMES = 32


def exception_name(cls: type[BaseException]) -> str:
    """The qualified name an exception class is stored under: ``module.QualName``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def validate_exception_names(value: object, field_name: str) -> list[str]:
    """``retry_on`` / ``dead_on`` of one job as qualified names, else ``ValidationError``.

    Takes an exception class, or a list/tuple of exception classes and qualified names
    (``"builtins.ValueError"``, ``"myapp.errors.Transient"``); a bare string is refused.
    """
    items = [value] if isinstance(value, type) else value
    if not isinstance(items, list | tuple):
        rule = "must be an exception class or a list of exception classes / qualified names"
        raise ValidationError(field_name, f"{rule} ('module.ClassName')")
    if len(items) > MAX_EXCEPTION_NAMES:
        raise ValidationError(field_name, f"at most {MAX_EXCEPTION_NAMES} exception types")
    names: list[str] = []
    for item in items:
        if isinstance(item, type) and issubclass(item, BaseException):
            names.append(exception_name(item))
        elif isinstance(item, str) and len(item) <= 300 and EXCEPTION_NAME_RE.fullmatch(item):
            names.append(item)
        else:
            rule = "is neither an exception class nor a qualified name 'module.ClassName'"
            raise ValidationError(field_name, f"{str(item)[:80]!r} {rule}")
    return names


def validate_priority(priority: object) -> int:
    """Return ``priority`` if it is an int in the allowed range, else raise."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValidationError("priority", f"must be an integer, got {type(priority).__name__}")
    if not -1_000_000 <= priority <= 1_000_000:
        raise ValidationError("priority", "must be between -1000000 and 1000000")
    return priority


def validate_max_attempts(max_attempts: object) -> int:
    """Return ``max_attempts`` if it is an int from 1 to ``MAX_ATTEMPTS_LIMIT``, else raise."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValidationError("max_attempts", f"must be an integer >= 1, got {max_attempts!r}")
    if max_attempts > MAX_ATTEMPTS_LIMIT:
        raise ValidationError(
            "max_attempts", f"must be <= {MAX_ATTEMPTS_LIMIT}, got {max_attempts}"
        )
    return max_attempts


def is_utf8(text: str) -> bool:
    """False for strings Python holds but UTF-8 cannot encode (lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_identifier(value: object, field_name: str, *, slash: bool = True) -> str:
    """Return ``value`` if it is a usable job id / idempotency key, else raise.

    Non-blank text of at most ``MAX_ID`` characters, valid UTF-8, with no control characters
    (a newline in an id forges log lines and table rows); ``slash=False`` also refuses ``/``,
    ``.`` and ``..`` (job ids appear as one path segment in URLs, and clients resolve dot
    segments before sending).
    """
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID:
        raise ValidationError(field_name, f"must be a non-empty string of <= {MAX_ID} characters")
    if _CONTROL.search(value):
        raise ValidationError(field_name, "must not contain control characters (newlines, tabs)")
    if not slash and ("/" in value or value in (".", "..")):
        raise ValidationError(field_name, "must not contain '/' or be '.' or '..'")
    if not is_utf8(value):
        raise ValidationError(field_name, "must be valid UTF-8 text (no lone surrogates)")
    return value


#: Longest delay or duration an option takes, in seconds: 100 years. Longer is a unit mistake
#: (milliseconds for seconds) or garbage, and a run time past it cannot be shown as a date.
MAX_DELAY = 100 * 365 * 86400.0


def validate_non_negative(value: object, field_name: str) -> float:
    """Return ``value`` as float if it is a finite number >= 0, else raise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field_name, f"must be a number, got {type(value).__name__}")
    if value != value or value < 0 or value == float("inf"):
        raise ValidationError(field_name, f"must be a finite number >= 0, got {value!r}")
    return float(value)


def validate_duration(value: object, field_name: str) -> float:
    """``validate_non_negative``, and at most ``MAX_DELAY`` seconds (a delay, a TTL)."""
    seconds = validate_non_negative(value, field_name)
    if seconds > MAX_DELAY:
        raise ValidationError(field_name, too_long(value))
    return seconds


def too_long(value: object) -> str:
    """The rule a duration over ``MAX_DELAY`` broke."""
    return f"must be at most {MAX_DELAY:.0f} seconds (100 years), got {value!r}"
