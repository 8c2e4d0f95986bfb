"""Table tests for conveyor.core.cron: counts, DST edges, aliases, intervals and validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.core.cron import CronSpec, IntervalSpec, parse_schedule
from conveyor.core.cron import describe as describe_spec
from conveyor.errors import ValidationError

NY = "America/New_York"
BERLIN = "Europe/Berlin"


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    """Epoch seconds of a UTC calendar time."""
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@pytest.mark.parametrize(
    ("expr", "minutes", "count"),
    [
        ("*/2 * * * *", 10, 5),
        ("* * * * *", 60, 60),
        ("*/15 * * * *", 60, 4),
        ("0 * * * *", 24 * 60, 24),
        ("0 9 * * mon-fri", 7 * 24 * 60, 5),
    ],
)
def test_fire_counts(expr: str, minutes: int, count: int) -> None:
    start = ts(2026, 1, 1)
    fires = CronSpec.parse(expr).fires_between(start, start + minutes * 60)
    assert len(fires) == count
    assert fires == sorted(set(fires))


# (expr, tz, window start UTC, window end UTC, expected fire times UTC)
DST_CASES = [
    # spring forward: 02:30 does not exist, runs once at 03:00 EDT = 07:00 UTC
    ("30 2 * * *", NY, (2026, 3, 8, 5), (2026, 3, 9, 4), [(2026, 3, 8, 7, 0)]),
    # fall back: 02:30 is not ambiguous, runs at 02:30 EST = 07:30 UTC
    ("30 2 * * *", NY, (2026, 11, 1, 4), (2026, 11, 2, 5), [(2026, 11, 1, 7, 30)]),
    # fall back: 01:30 happens twice, runs once at the first (EDT) = 05:30 UTC
    ("30 1 * * *", NY, (2026, 11, 1, 4), (2026, 11, 2, 5), [(2026, 11, 1, 5, 30)]),
    # repeated hour: each wall time once; 01:00/01:30 EST (06:00/06:30 UTC) do not fire
    (
        "*/30 * * * *",
        NY,
        (2026, 11, 1, 4, 30),
        (2026, 11, 1, 8),
        [(2026, 11, 1, h, m) for h, m in ((5, 0), (5, 30), (7, 0), (7, 30), (8, 0))],
    ),
    (
        "0 * * * *",
        NY,
        (2026, 11, 1, 4),
        (2026, 11, 1, 8),
        [(2026, 11, 1, 5, 0), (2026, 11, 1, 7, 0), (2026, 11, 1, 8, 0)],
    ),
    # spring gap: 02:00 and 03:00 wall times collapse into one run at 07:00 UTC
    (
        "0 * * * *",
        NY,
        (2026, 3, 8, 5),
        (2026, 3, 8, 9),
        [(2026, 3, 8, 6, 0), (2026, 3, 8, 7, 0), (2026, 3, 8, 8, 0), (2026, 3, 8, 9, 0)],
    ),
    (
        "*/15 * * * *",
        NY,
        (2026, 3, 8, 6, 30),
        (2026, 3, 8, 7, 30),
        [(2026, 3, 8, 6, 45), (2026, 3, 8, 7, 0), (2026, 3, 8, 7, 15), (2026, 3, 8, 7, 30)],
    ),
    # Berlin weekly across the March change (2026-03-29): 09:00 local each Monday
    (
        "0 9 * * mon",
        BERLIN,
        (2026, 3, 20),
        (2026, 4, 7),
        [(2026, 3, 23, 8, 0), (2026, 3, 30, 7, 0), (2026, 4, 6, 7, 0)],
    ),
    # and across the October change (2026-10-25)
    ("0 9 * * mon", BERLIN, (2026, 10, 18), (2026, 10, 27), [(2026, 10, 19, 7), (2026, 10, 26, 8)]),
    # London gap 01:00-02:00 on 2026-03-29: 01:30 runs at 02:00 BST = 01:00 UTC
    ("30 1 * * *", "Europe/London", (2026, 3, 29), (2026, 3, 30), [(2026, 3, 29, 1, 0)]),
    # half-hour shift: Lord Howe jumps 02:00 -> 02:30 on 2026-10-04 (15:30 UTC on the 3rd)
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        (2026, 10, 3, 12),
        (2026, 10, 4, 12),
        [(2026, 10, 3, 15, 30)],
    ),
]


@pytest.mark.parametrize(("expr", "tz", "start", "end", "expected"), DST_CASES)
def test_dst_fire_times(
    expr: str,
    tz: str,
    start: tuple[int, ...],
    end: tuple[int, ...],
    expected: list[tuple[int, ...]],
) -> None:
    spec = CronSpec.parse(expr, tz)
    assert spec.fires_between(ts(*start), ts(*end)) == [ts(*e) for e in expected]


@pytest.mark.parametrize(
    ("day", "count"),
    [((2026, 3, 7), 1440), ((2026, 3, 8), 1380), ((2026, 11, 1), 1440), ((2026, 11, 2), 1440)],
)
def test_every_minute_fires_each_wall_minute_once(day: tuple[int, int, int], count: int) -> None:
    spec = CronSpec.parse("* * * * *", NY)
    zone_day = datetime(*day, tzinfo=ZoneInfo(NY))
    start = zone_day.timestamp() - 1  # include local midnight itself
    end = (zone_day + timedelta(days=1)).timestamp() - 1
    assert len(spec.fires_between(start, end, limit=2000)) == count


# (expr, tz, t, next_after(t), previous_at_or_before(t))
POINT_CASES = [
    ("*/30 * * * *", NY, (2026, 11, 1, 6, 40), (2026, 11, 1, 7, 0), (2026, 11, 1, 5, 30)),
    # t is 01:10 EST (second pass); 01:45 EDT already happened at 05:45 UTC
    ("45 1 * * *", NY, (2026, 11, 1, 6, 10), (2026, 11, 2, 6, 45), (2026, 11, 1, 5, 45)),
    ("30 2 * * *", NY, (2026, 3, 8, 7, 0), (2026, 3, 9, 6, 30), (2026, 3, 8, 7, 0)),
    ("30 2 * * *", NY, (2026, 3, 8, 6, 59), (2026, 3, 8, 7, 0), (2026, 3, 7, 7, 30)),
    ("0 0 * * *", "UTC", (2026, 1, 1, 0, 0), (2026, 1, 2, 0, 0), (2026, 1, 1, 0, 0)),
]


@pytest.mark.parametrize("tz", ["UTC", NY])
def test_just_before_a_fire_time(tz: str) -> None:
    # 1893455999.9999998 rounds to the next second in datetime.fromtimestamp: must not skip it
    spec = CronSpec.parse("* * * * *", tz)
    assert spec.next_after(1893455999.9999998) == 1893456000.0
    assert spec.previous_at_or_before(1893455999.9999998) == 1893455940.0


@pytest.mark.parametrize(("expr", "tz", "t", "nxt", "prev"), POINT_CASES)
def test_next_and_previous(
    expr: str, tz: str, t: tuple[int, ...], nxt: tuple[int, ...], prev: tuple[int, ...]
) -> None:
    spec = CronSpec.parse(expr, tz)
    assert spec.next_after(ts(*t)) == ts(*nxt)
    assert spec.previous_at_or_before(ts(*t)) == ts(*prev)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("@hourly", (2026, 1, 1, 1)),
        ("@daily", (2026, 1, 2)),
        ("@midnight", (2026, 1, 2)),
        ("@weekly", (2026, 1, 4)),  # 2026-01-01 is a Thursday; weekly means Sunday 00:00
        ("@monthly", (2026, 2, 1)),
        ("@yearly", (2027, 1, 1)),
        ("@annually", (2027, 1, 1)),
        ("@Daily", (2026, 1, 2)),
        ("0 0 1 jan *", (2027, 1, 1)),
        ("0 9 * * mon-fri", (2026, 1, 1, 9)),
        # equal ranges are one value (croniter 7 alone would widen them to the whole field)
        ("5-5 * * * *", (2026, 1, 1, 0, 5)),
        ("0 0 * * sun-sun", (2026, 1, 4)),
        ("0 0 * * 0-0/2", (2026, 1, 4)),
        ("0 0 * 3-3 *", (2026, 3, 1)),
    ],
)
def test_aliases_and_names(expr: str, expected: tuple[int, ...]) -> None:
    assert CronSpec.parse(expr).next_after(ts(2026, 1, 1)) == ts(*expected)


@pytest.mark.parametrize(
    ("seconds", "anchor", "t", "nxt", "prev"),
    [
        (60, 0.0, 125.0, 180.0, 120.0),
        (60, 0.0, 180.0, 240.0, 180.0),
        (60, 30.0, 0.0, 30.0, -30.0),
        (7, 0.0, ts(2026, 1, 1) + 0.5, ts(2026, 1, 1) + 7, ts(2026, 1, 1)),  # ts is 7k
        (1, 0.0, 10.25, 11.0, 10.0),
    ],
)
def test_interval(seconds: int, anchor: float, t: float, nxt: float, prev: float) -> None:
    spec = IntervalSpec(seconds, anchor)
    assert spec.next_after(t) == nxt
    assert spec.previous_at_or_before(t) == prev


def test_interval_fires_between_and_limit() -> None:
    spec = IntervalSpec(60)
    assert spec.fires_between(0, 300) == [60.0, 120.0, 180.0, 240.0, 300.0]
    assert spec.fires_between(0, 300, limit=2) == [60.0, 120.0]
    assert spec.fires_between(300, 0) == []


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"cron": "*/5 * * * *", "tz": BERLIN}, CronSpec("*/5 * * * *", BERLIN)),
        ({"cron": "  */5   * * * * "}, CronSpec("*/5 * * * *")),
        ({"every": 60}, IntervalSpec(60)),
        ({"every": 60.0}, IntervalSpec(60)),
        ({"every": timedelta(minutes=5)}, IntervalSpec(300)),
    ],
)
def test_parse_schedule(kwargs: dict[str, Any], expected: object) -> None:
    assert parse_schedule(**kwargs) == expected


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        (CronSpec("*/5 * * * *", BERLIN), "cron '*/5 * * * *' in Europe/Berlin"),
        (IntervalSpec(60), "every 60s"),
        (IntervalSpec(60, 30), "every 60s from anchor 30"),
    ],
)
def test_describe(spec: CronSpec | IntervalSpec, text: str) -> None:
    assert describe_spec(spec) == text


# (parse_schedule kwargs, field, fragment of the message)
INVALID = [
    ({"cron": "60 * * * *"}, "cron", "cron: minute field '60' out of range 0-59"),
    ({"cron": "* 24 * * *"}, "cron", "hour field '24' out of range 0-23"),
    ({"cron": "* * 32 * *"}, "cron", "day field '32' out of range 1-31"),
    ({"cron": "* * 0 * *"}, "cron", "day field '0' out of range 1-31"),
    ({"cron": "* * * 13 *"}, "cron", "month field '13' out of range 1-12"),
    ({"cron": "* * * * 8"}, "cron", "weekday field '8' out of range 0-7"),
    ({"cron": "0-70 * * * *"}, "cron", "minute field '0-70' out of range 0-59"),
    ({"cron": "*/x * * * *"}, "cron", "minute field '*/x' is invalid"),
    ({"cron": "a b c d e"}, "cron", "minute field 'a'"),
    ({"cron": "* * * *"}, "cron", "expected 5 fields"),
    ({"cron": "* * * * * *"}, "cron", "expected 5 fields"),
    ({"cron": ""}, "cron", "non-empty"),
    ({"cron": "@reboot"}, "cron", "unknown alias '@reboot'"),
    ({"cron": "0 0 30 2 *"}, "cron", "never fires"),
    ({"cron": "R * * * *"}, "cron", "random/hashed"),
    ({"cron": "* * * * *", "tz": "Mars/Base"}, "tz", "tz: unknown time zone 'Mars/Base'"),
    ({"cron": "* * * * *", "tz": "America"}, "tz", "unknown time zone"),
    ({"cron": "* * * * *", "tz": ""}, "tz", "non-empty"),
    ({"every": 60, "tz": "Nowhere/Town"}, "tz", "unknown time zone"),
    ({"every": 0}, "every", "whole number of seconds >= 1"),
    ({"every": -5}, "every", "whole number of seconds >= 1"),
    ({"every": 1.5}, "every", "whole number of seconds >= 1"),
    ({"every": timedelta(milliseconds=500)}, "every", "whole number"),
    ({"every": True}, "every", "whole number"),
    ({"every": "60"}, "every", "whole number"),
    ({}, "schedule", "exactly one of cron= or every="),
    ({"cron": "* * * * *", "every": 60}, "schedule", "exactly one"),
]


@pytest.mark.parametrize(("kwargs", "field", "fragment"), INVALID)
def test_validation_errors(kwargs: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_schedule(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_direct_construction_validates() -> None:
    with pytest.raises(ValidationError, match="minute"):
        CronSpec("61 * * * *")
    with pytest.raises(ValidationError, match="every"):
        IntervalSpec(0)
    with pytest.raises(ValidationError, match="anchor"):
        IntervalSpec(60, float("nan"))


# --- property: next_after is the first fire after t (UTC, checked minute by minute) ---

FIELD_RANGES = {"minute": (0, 59), "hour": (0, 23), "day": (1, 28), "month": (1, 12), "dow": (0, 6)}


@st.composite
def cron_field(draw: st.DrawFn, name: str) -> tuple[str, frozenset[int] | None]:
    """A field as (text, matching values); None means '*' (unrestricted)."""
    low, high = FIELD_RANGES[name]
    kind = draw(st.sampled_from(["star", "step", "list", "range"]))
    if kind == "star":
        return "*", None
    if kind == "step" and name in ("minute", "hour"):  # "*/k" would blur the day/dow OR rule
        k = draw(st.integers(1, 20))
        return f"*/{k}", frozenset(range(low, high + 1, k))
    if kind == "range":
        a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
        return f"{a}-{b}", frozenset(range(a, b + 1))
    values = draw(st.lists(st.integers(low, high), min_size=1, max_size=3, unique=True))
    return ",".join(map(str, values)), frozenset(values)


@st.composite
def simple_cron(draw: st.DrawFn) -> tuple[str, list[frozenset[int] | None]]:
    fields = [draw(cron_field(name)) for name in FIELD_RANGES]
    return " ".join(text for text, _ in fields), [values for _, values in fields]


def matches(sets: list[frozenset[int] | None], when: datetime) -> bool:
    """Reference matcher: classic cron, day OR weekday when both are restricted."""
    minute, hour, day, month, dow = sets
    cron_dow = (when.weekday() + 1) % 7  # cron counts Sunday as 0

    def ok(values: frozenset[int] | None, value: int) -> bool:
        return values is None or value in values

    if day is not None and dow is not None:
        day_ok = when.day in day or cron_dow in dow
    else:
        day_ok = ok(day, when.day) and ok(dow, cron_dow)
    return ok(minute, when.minute) and ok(hour, when.hour) and ok(month, when.month) and day_ok


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    cron=simple_cron(),
    t=st.floats(min_value=ts(2020, 1, 1), max_value=ts(2030, 1, 1), allow_nan=False),
)
def test_next_after_is_first_fire(cron: tuple[str, list[frozenset[int] | None]], t: float) -> None:
    expr, sets = cron
    spec = CronSpec.parse(expr)
    nxt = spec.next_after(t)
    assert nxt > t
    assert matches(sets, utc(nxt))
    assert nxt % 60 == 0
    window_end = min(nxt, t + 2 * 86400)
    minute = utc(t).replace(second=0, microsecond=0) + timedelta(minutes=1)
    while minute.timestamp() < window_end:
        assert not matches(sets, minute), f"{expr} fires at {minute}, before {utc(nxt)}"
        minute += timedelta(minutes=1)
    assert spec.previous_at_or_before(nxt) == nxt
    prev = spec.previous_at_or_before(t)
    assert prev is not None and prev <= t
    assert spec.next_after(prev) == nxt
