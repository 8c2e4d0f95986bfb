"""Schedule arithmetic: cron expressions and fixed intervals, as pure functions of "now".

Nothing here reads a clock or does I/O: every instant is an argument, in epoch seconds (UTC).

Cron (``CronSpec``) accepts standard 5-field expressions (minute hour day month weekday, names
such as ``mon-fri`` and ``jan``, ``L`` and ``#`` as croniter allows), and the aliases
``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight`` and ``@hourly``.
croniter's random/hashed tokens (``R``, ``H``) are refused: they are not deterministic. When both
day and weekday are restricted, a day matching either fires (classic cron "OR" rule). An equal
range such as ``3-3`` means the single value 3 (croniter alone would read it as the whole field);
wrap-around ranges such as ``22-2`` (hours 22..2) are croniter's extension and are kept.

Time zones and DST. croniter only iterates *naive wall-clock* times here; the conversion of each
wall time to UTC is ours, so the result is exact and independent of croniter's tz handling:

* a wall time that does not exist (spring-forward gap, e.g. 02:30 in America/New_York on the
  March change day) fires once, at the first instant after the gap (03:00 local);
* an ambiguous wall time (autumn overlap, e.g. 01:30 on the November change day) fires once, at
  its FIRST occurrence (``fold=0``);
* hence a schedule like ``*/15 * * * *`` fires each wall-clock time once: the repeated hour after
  a fall-back does not fire again, and all gap times collapse into one run at the gap's end.

The wall->UTC map is monotone, so "strictly after t" / "at or before t" searches stay correct.

Interval (``IntervalSpec``) fires at ``anchor + k * seconds`` for every integer ``k``; with the
default anchor 0 (the epoch) a 60 s interval fires on whole UTC minutes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from conveyor.errors import ValidationError

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 7))
_RANDOM_TOKEN = re.compile(r"(?<![a-z])[rh](?![a-z])")  # croniter's R / H, not "mar" or "thu"
_EQUAL_RANGE = re.compile(r"^(\w+)-\1(?:/\d+)?\Z")  # "5-5", "sun-sun/2": croniter widens these
_PROBE_START = datetime(2000, 1, 1)  # fixed, so validation never depends on the real date
# croniter raises ValueError subclasses; the rest are caught defensively on hostile input:
_CRONITER_ERRORS = (ValueError, LookupError, TypeError, OverflowError)


def _load_zone(tz: object) -> ZoneInfo:
    """Return the ZoneInfo for an IANA name, or raise ValidationError naming ``tz``."""
    if not isinstance(tz, str) or not tz:
        raise ValidationError("tz", f"time zone must be a non-empty IANA name, got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory such as "America"
        raise ValidationError("tz", f"unknown time zone {tz!r}") from None


def _check_field(index: int, value: str) -> None:
    """Validate one field by letting croniter judge it alone, so the error can name the field."""
    name, low, high = _FIELDS[index]
    if _RANDOM_TOKEN.search(value):
        raise ValidationError("cron", f"{name} field {value!r} uses random/hashed syntax (R, H)")
    probe = ["*"] * 5
    probe[index] = value
    try:
        croniter(" ".join(probe), _PROBE_START)
    except _CRONITER_ERRORS as exc:
        text = repr(str(exc))[1:-1]  # croniter quotes the field raw: escape control characters
        if "out of range" in text or "out of bands" in text or "negative" in text:
            rule = f"{name} field {value!r} out of range {low}-{high}"
        else:
            rule = f"{name} field {value!r} is invalid ({text})"
        raise ValidationError("cron", rule) from None


def _normalize_cron(expr: object) -> tuple[str, str]:
    """Return (normalized expression, expanded 5-field form) or raise ValidationError."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValidationError("cron", f"expression must be a non-empty string, got {expr!r}")
    text = " ".join(expr.split()).lower()
    if text.startswith("@"):
        if text not in _ALIASES:
            raise ValidationError(
                "cron", f"unknown alias {text!r}; use one of {', '.join(_ALIASES)}"
            )
        return text, _ALIASES[text]
    parts = text.split(" ")
    if len(parts) != 5:  # croniter would also take 6 or 7 fields (seconds, year)
        raise ValidationError(
            "cron", f"expected 5 fields (minute hour day month weekday), got {len(parts)}"
        )
    for index, value in enumerate(parts):
        _check_field(index, value)
    # croniter reads an equal range ("3-3", "sun-sun") as the WHOLE field; cron means one value.
    parts = [",".join(_EQUAL_RANGE.sub(r"\1", item) for item in part.split(",")) for part in parts]
    expanded = " ".join(parts)
    try:  # fields can be valid alone yet never match together, e.g. "0 0 30 2 *"
        croniter(expanded, _PROBE_START).get_next(datetime)
    except _CRONITER_ERRORS:
        raise ValidationError("cron", f"expression {text!r} never fires") from None
    return text, expanded


def _wall_to_utc(wall: datetime, zone: ZoneInfo) -> float:
    """Epoch seconds for a naive wall time: first occurrence if ambiguous, gap end if missing."""
    first = wall.replace(tzinfo=zone, fold=0).timestamp()
    if datetime.fromtimestamp(first, zone).replace(tzinfo=None) == wall:
        return first
    # In a gap fold=1 reads the wall time with the new offset (an instant before the change) and
    # fold=0 with the old one (after it). Bisect whole seconds for the first instant whose wall
    # time is past ``wall``: that is the transition (tzdata transitions fall on whole seconds).
    low = math.floor(wall.replace(tzinfo=zone, fold=1).timestamp())
    high = math.ceil(first)
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) > wall:
            high = mid
        else:
            low = mid
    return float(high)


class _Schedule:
    """Shared search logic; subclasses supply ``_iter_after`` and ``previous_at_or_before``."""

    def _iter_after(self, t: float) -> Iterator[float]:
        raise NotImplementedError

    def next_after(self, t: float) -> float:
        """Return the first fire time strictly after ``t`` (epoch seconds, UTC)."""
        return next(self._iter_after(t))

    def fires_between(self, start: float, end: float, limit: int = 1000) -> list[float]:
        """Return fire times ``t`` with ``start < t <= end``, ascending, at most ``limit``."""
        fires: list[float] = []
        if limit <= 0 or end <= start:
            return fires
        for fire in self._iter_after(start):
            if fire > end:
                break
            fires.append(fire)
            if len(fires) >= limit:
                break
        return fires


@dataclass(frozen=True)
class CronSpec(_Schedule):
    """A cron expression evaluated in an IANA time zone (see the module docstring for DST)."""

    expr: str
    tz: str = "UTC"
    _expanded: str = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        normalized, expanded = _normalize_cron(self.expr)
        zone = _load_zone(self.tz)
        # frozen: the derived fields are set once here, through object.__setattr__
        object.__setattr__(self, "expr", normalized)
        object.__setattr__(self, "_expanded", expanded)
        object.__setattr__(self, "_zone", zone)

    @classmethod
    def parse(cls, expr: str, tz: str = "UTC") -> CronSpec:
        """Validate ``expr`` and ``tz`` and return the spec; raise ValidationError if bad."""
        return cls(expr, tz)

    def _iter_after(self, t: float) -> Iterator[float]:
        # Walls before local(t) map to instants <= t (the map is monotone), so start at local(t).
        # Floor first: fromtimestamp rounds to the microsecond and may land past t.
        local = datetime.fromtimestamp(math.floor(t), self._zone).replace(tzinfo=None, fold=0)
        walls = croniter(self._expanded, local)
        last = t
        while True:
            fire = _wall_to_utc(walls.get_next(datetime), self._zone)
            if fire > last:  # skips repeated-hour walls and merges gap walls into one run
                last = fire
                yield fire

    def previous_at_or_before(self, t: float) -> float | None:
        """Return the latest fire time ``<= t``, or None if croniter finds none."""
        local = datetime.fromtimestamp(math.floor(t), self._zone)  # fires are whole seconds
        # During the repeated hour, later walls of the first pass are already in the past.
        margin = timedelta(0)
        first, second = local.replace(fold=0).utcoffset(), local.utcoffset()
        if local.fold == 1 and first is not None and second is not None:
            margin = first - second
        start = local.replace(tzinfo=None, fold=0) + margin + timedelta(seconds=1)
        walls = croniter(self._expanded, start)
        try:
            while True:
                fire = _wall_to_utc(walls.get_prev(datetime), self._zone)
                if fire <= t:
                    return fire
        except _CRONITER_ERRORS:  # ran off the calendar croniter supports
            return None


#: Longest ``every=`` interval: 366 days (fire times stay representable; use cron for rarer).
MAX_EVERY = 366 * 86400


def _whole_seconds(every: object) -> int:
    """Convert an interval given as int, integral float or timedelta to whole seconds."""
    value: object = every.total_seconds() if isinstance(every, timedelta) else every
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_EVERY:
        raise ValidationError(
            "every",
            f"interval must be a whole number of seconds >= 1 and <= {MAX_EVERY} "
            f"(366 days), got {str(every)[:40]}",
        )
    return value


@dataclass(frozen=True)
class IntervalSpec(_Schedule):
    """Fire every ``seconds`` seconds at ``anchor + k * seconds`` (epoch seconds, any integer k)."""

    seconds: int
    anchor: float = 0.0

    def __post_init__(self) -> None:
        _whole_seconds(self.seconds)
        if isinstance(self.anchor, bool) or not isinstance(self.anchor, int | float):
            raise ValidationError(
                "anchor", f"must be a number of epoch seconds, got {self.anchor!r}"
            )
        if not math.isfinite(self.anchor):
            raise ValidationError("anchor", f"must be finite, got {self.anchor!r}")

    @classmethod
    def parse(cls, every: float | int | timedelta, anchor: float = 0.0) -> IntervalSpec:
        """Validate ``every`` (int, integral float or timedelta) and return the spec."""
        return cls(_whole_seconds(every), anchor)

    def _index_at_or_before(self, t: float) -> int:
        """Largest k with anchor + k*seconds <= t, corrected for float rounding."""
        k = math.floor((t - self.anchor) / self.seconds)
        while self.anchor + k * self.seconds > t:
            k -= 1
        while self.anchor + (k + 1) * self.seconds <= t:
            k += 1
        return k

    def _iter_after(self, t: float) -> Iterator[float]:
        k = self._index_at_or_before(t) + 1
        while True:
            yield self.anchor + k * self.seconds
            k += 1

    def previous_at_or_before(self, t: float) -> float | None:
        """Return the latest fire time ``<= t`` (never None: the grid is unbounded)."""
        return self.anchor + self._index_at_or_before(t) * self.seconds


Spec = CronSpec | IntervalSpec


def parse_schedule(
    cron: str | None = None,
    every: float | int | timedelta | None = None,
    tz: str = "UTC",
) -> Spec:
    """Build a schedule from exactly one of ``cron`` or ``every``; raise ValidationError if bad.

    ``tz`` applies to cron; for intervals (absolute time) it is still validated, so typos surface.
    """
    if cron is not None and every is None:
        return CronSpec.parse(cron, tz)
    if every is not None and cron is None:
        _load_zone(tz)
        return IntervalSpec.parse(every)
    raise ValidationError("schedule", "give exactly one of cron= or every=")


def describe(spec: Spec) -> str:
    """Return a short human description, e.g. "cron '*/5 * * * *' in Europe/Berlin"."""
    if isinstance(spec, CronSpec):
        return f"cron '{spec.expr}' in {spec.tz}"
    text = f"every {spec.seconds}s"
    return f"{text} from anchor {spec.anchor:g}" if spec.anchor else text
