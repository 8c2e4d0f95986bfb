"""Schedule records: the stored shape of a schedule, its validation, ids and history entries.

A schedule is one JSON document in the broker's ``schedules`` collection (``broker.docs``), so
every process sees the same set. Its history is a bounded broker log named
``schedule-history:{name}``. Everything here is pure: no clock, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import timedelta
from functools import lru_cache
from typing import Any, Literal

from ..core.cron import CronSpec, IntervalSpec, Spec, parse_schedule
from ..core.job import validate_priority, validate_queue_name, validate_task_name
from ..errors import ConveyorError, ValidationError

COLLECTION = "schedules"
MisfirePolicy = Literal["skip", "run_once", "backfill"]
OverlapPolicy = Literal["allow", "skip"]
MISFIRE_POLICIES: tuple[str, ...] = ("skip", "run_once", "backfill")
OVERLAP_POLICIES: tuple[str, ...] = ("allow", "skip")
OUTCOMES = ("enqueued", "skipped-overlap", "skipped-misfire", "duplicate", "error")
DEFAULT_MISFIRE_GRACE = 60.0
DEFAULT_MAX_BACKFILL = 100
MAX_BACKFILL_LIMIT = 10_000
NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,150}\Z")  # \Z: "$" would accept a final "\n"
#: Options accepted by ``app.cron`` / ``app.every`` / ``app.schedule_cron`` besides the timing.
OPTION_NAMES = frozenset(
    {
        "name",
        "tz",
        "args",
        "kwargs",
        "queue",
        "priority",
        "misfire",
        "max_backfill",
        "misfire_grace",
        "overlap",
        "paused",
    }
)
#: Fields whose change means a different timetable: the next run is recomputed on upsert.
TIMING_FIELDS = ("cron", "every", "tz")
#: Fields copied from a (code or run-time) declaration onto the stored schedule.
DEFINITION_FIELDS = (
    "task",
    "cron",
    "every",
    "tz",
    "args",
    "kwargs",
    "queue",
    "priority",
    "misfire",
    "max_backfill",
    "misfire_grace",
    "overlap",
    "task_queue",
)


class ScheduleNotFound(ConveyorError, LookupError):
    """No stored schedule has this name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"schedule {name!r} not found")


@dataclass(frozen=True)
class Schedule:
    """A named schedule: which task to enqueue, when, with what, and its firing state.

    Exactly one of ``cron`` (5-field expression or ``@daily``-style alias, evaluated in ``tz``)
    and ``every`` (whole seconds) is set. ``queue``/``priority`` of None use the task's defaults;
    ``task_queue`` is the task's own queue as the declaring process knew it (None: it did not),
    where a scheduler that does not register the task sends the ticks (not ``default``).
    ``next_fire_at``/``last_fire_at`` are epoch seconds; ``rev`` increments on every stored change
    and is the compare-and-set field that lets any number of schedulers cooperate.
    """

    name: str
    task: str
    cron: str | None = None
    every: int | None = None
    tz: str = "UTC"
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    misfire: MisfirePolicy = "run_once"
    max_backfill: int = DEFAULT_MAX_BACKFILL
    misfire_grace: float = DEFAULT_MISFIRE_GRACE
    overlap: OverlapPolicy = "allow"
    paused: bool = False
    next_fire_at: float | None = None
    last_fire_at: float | None = None
    last_job_id: str | None = None
    source: str = "runtime"
    created_at: float | None = None
    updated_at: float | None = None
    rev: int = 0
    task_queue: str | None = None  # absent from documents stored before it existed

    @property
    def spec(self) -> Spec:
        """The timing spec (``CronSpec`` or ``IntervalSpec``) of this schedule."""
        return _cached_spec(self.cron, self.every, self.tz)

    @property
    def expr(self) -> str:
        """A short description of the timing: the cron expression or ``every Ns``."""
        return self.cron if self.cron is not None else f"every {self.every}s"

    def definition(self) -> dict[str, Any]:
        """The declared fields (what code or an operator chose), without firing state."""
        doc = self.to_doc()
        return {key: doc[key] for key in DEFINITION_FIELDS}

    def to_doc(self) -> dict[str, Any]:
        """The JSON document stored in the broker."""
        return asdict(self)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Schedule:
        """Rebuild from a stored document (unknown keys from newer versions are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in doc.items() if key in known})

    def with_state(self, **changes: Any) -> Schedule:
        """A copy with some fields changed."""
        return replace(self, **changes)


@lru_cache(maxsize=1024)
def _cached_spec(cron: str | None, every: int | None, tz: str) -> Spec:
    """Parsed specs are immutable, and parsing validates through croniter: parse each once."""
    return parse_schedule(cron=cron, every=every, tz=tz)


def validate_name(name: object) -> str:
    """Schedule names: 1-150 of letters, digits and ``_ . : -``."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(
            "name", f"schedule name must be 1-150 characters of A-Z a-z 0-9 _ . : -, got {name!r}"
        )
    return name


def build_schedule(
    name: str,
    task: str,
    *,
    cron: str | None = None,
    every: int | float | timedelta | None = None,
    source: str = "runtime",
    **options: Any,
) -> Schedule:
    """Validate a declaration and return the Schedule (no firing state yet).

    Raises ``ValidationError`` naming the offending field: ``cron`` (syntax or out-of-range
    field), ``tz`` (unknown zone), ``every``, ``misfire``, ``overlap``, ``queue``, ...
    """
    unknown = set(options) - OPTION_NAMES
    if unknown:
        raise ValidationError(
            "options", f"unknown schedule option(s): {', '.join(sorted(unknown))}"
        )
    tz = options.get("tz") or "UTC"
    spec = parse_schedule(cron=cron, every=every, tz=tz)
    checked = _checked_options(options)
    return Schedule(
        name=validate_name(name),
        task=validate_task_name(task),
        cron=spec.expr if isinstance(spec, CronSpec) else None,
        every=spec.seconds if isinstance(spec, IntervalSpec) else None,
        tz=tz,
        paused=bool(options.get("paused", False)),
        source=source,
        **checked,
    )


def _checked_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options besides timing, name and task, validated and normalized (``Schedule``
    fields): what ``build_schedule`` and ``check_stored`` both require."""
    args = options.get("args") or []
    kwargs = options.get("kwargs") or {}
    if not isinstance(args, list | tuple):
        raise ValidationError("args", f"must be a list, got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise ValidationError("kwargs", f"must be a dict, got {type(kwargs).__name__}")
    _check_plain_json(list(args), "args")
    _check_plain_json(kwargs, "kwargs")
    queue = options.get("queue")
    priority = options.get("priority")
    misfire = options.get("misfire", "run_once")
    if misfire not in MISFIRE_POLICIES:
        raise ValidationError("misfire", f"must be one of {', '.join(MISFIRE_POLICIES)}")
    overlap = options.get("overlap", "allow")
    if overlap not in OVERLAP_POLICIES:
        raise ValidationError("overlap", f"must be one of {', '.join(OVERLAP_POLICIES)}")
    max_backfill = options.get("max_backfill", DEFAULT_MAX_BACKFILL)
    if (
        isinstance(max_backfill, bool)
        or not isinstance(max_backfill, int)
        or not 1 <= max_backfill <= MAX_BACKFILL_LIMIT
    ):
        raise ValidationError("max_backfill", f"must be an integer 1..{MAX_BACKFILL_LIMIT}")
    grace = options.get("misfire_grace", DEFAULT_MISFIRE_GRACE)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise ValidationError("misfire_grace", "must be a number of seconds >= 0")
    return {
        "args": list(args),
        "kwargs": dict(kwargs),
        "queue": None if queue is None else validate_queue_name(queue),
        "priority": None if priority is None else validate_priority(priority),
        "misfire": misfire,
        "max_backfill": max_backfill,
        "misfire_grace": float(grace),
        "overlap": overlap,
    }


#: Firing-state fields holding epoch seconds (or null) in a stored schedule.
_TIME_FIELDS = ("next_fire_at", "last_fire_at", "created_at", "updated_at")


def stored_schedule(doc: object) -> Schedule:
    """A stored document as a ``Schedule``, its firing state checked (cheap: every pass).

    Raises ``ValidationError`` naming the field when the document (written by an older
    version, another client or by hand) has a missing field or a value of the wrong type.
    """
    if not isinstance(doc, Mapping):
        raise ValidationError("schedule", f"must be a JSON object, got {type(doc).__name__}")
    if "rev" not in doc:  # every change is a compare-and-set on it: none could succeed
        raise ValidationError("rev", "is missing")
    try:
        schedule = Schedule.from_doc(doc)
    except TypeError as exc:  # a required field (name, task) is missing
        raise ValidationError("schedule", str(exc)) from None
    for name in _TIME_FIELDS:
        value = getattr(schedule, name)
        if value is not None and not _finite_number(value):
            raise ValidationError(name, f"must be epoch seconds or null, got {_short(value)}")
    if isinstance(schedule.rev, bool) or not isinstance(schedule.rev, int):
        raise ValidationError("rev", f"must be an integer, got {_short(schedule.rev)}")
    if not isinstance(schedule.paused, bool):
        raise ValidationError("paused", f"must be true or false, got {_short(schedule.paused)}")
    for name in ("last_job_id", "source"):
        value = getattr(schedule, name)
        if not isinstance(value, str) and (value is not None or name == "source"):
            raise ValidationError(name, f"must be a string, got {_short(value)}")
    return schedule


def check_stored(schedule: Schedule) -> Schedule:
    """Check a stored schedule's definition as ``build_schedule`` checks a new one (name,
    task, timing, arguments, policies); ``ValidationError`` naming the field otherwise."""
    validate_name(schedule.name)
    validate_task_name(schedule.task)
    for name in ("cron", "every", "tz"):  # the spec cache needs hashable values
        if isinstance(getattr(schedule, name), list | dict):
            raise ValidationError(
                name, f"must be a plain value, got {_short(getattr(schedule, name))}"
            )
    schedule.spec  # noqa: B018 - parsing (cached) validates cron / every / tz
    if not isinstance(schedule.args, list):
        raise ValidationError("args", f"must be a list, got {type(schedule.args).__name__}")
    _checked_options({key: getattr(schedule, key) for key in _CHECKED})
    if schedule.task_queue is not None:
        validate_queue_name(schedule.task_queue, "task_queue")
    return schedule


#: The ``Schedule`` fields ``_checked_options`` validates.
_CHECKED = (
    "args",
    "kwargs",
    "queue",
    "priority",
    "misfire",
    "max_backfill",
    "misfire_grace",
    "overlap",
)


def _finite_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _short(value: object) -> str:
    """``repr(value)`` cut to 40 characters (a stored value may be huge or hostile)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _check_plain_json(value: Any, where: str) -> None:
    """Schedule arguments are stored as plain JSON: refuse values that would not round-trip."""
    if isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN / infinity
        raise ValidationError(where, f"numbers must be finite (no NaN or infinity), got {value!r}")
    if value is None or isinstance(value, str | int | float | bool):
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_plain_json(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(where, f"dict keys must be strings, got {key!r}")
            _check_plain_json(item, where)
        return
    raise ValidationError(
        where, f"schedule arguments must be plain JSON values, got {type(value).__name__}"
    )


def job_id_for(name: str, fire_at: float) -> str:
    """The deterministic job id of one tick: ``sched:{name}:{fire time in epoch ms}``."""
    return f"sched:{name}:{round(fire_at * 1000)}"


def history_log(name: str) -> str:
    """The broker log holding a schedule's history."""
    return f"schedule-history:{name}"


def history_entry(
    fire_at: float, job_id: str | None, outcome: str, at: float, scheduler: str, **extra: Any
) -> dict[str, Any]:
    """One history record: fire time, job id, outcome, when it was decided and by whom."""
    return {
        "fire_at": fire_at,
        "job_id": job_id,
        "outcome": outcome,
        "at": at,
        "scheduler": scheduler,
        **extra,
    }
