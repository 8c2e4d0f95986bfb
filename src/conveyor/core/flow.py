"""Flow control specs (issue 15): rate limits, per-key concurrency, fair groups. Pure, no I/O.

A task's limits (``RateLimit``, ``ConcurrencyLimit``, ``fair_by``) are turned, at enqueue, into
the job's ``flow`` record: the limiters it needs and its *group*. Every value is evaluated
then (a ``key`` callable over the job's arguments runs in the producer, never in the claim)::

    {"g": "<group>", "r": [[bucket, rate, per, burst], ...], "c": [[slot, n], ...]}

``bucket`` / ``slot`` name one limiter instance ("rate:<task>" for a global limit,
"rate:<task>:<key>=<value>" per key); ``g`` joins them (plus the fair key), so jobs of one
group wait on exactly the same limiters. A claim serves the groups of a queue round-robin and
skips a group whose limiter says no, so a throttled key never blocks another key's jobs.

Token buckets: ``rate`` tokens per ``per`` seconds, at most ``burst`` stored (default: the rate
itself). ``bucket_take`` is the arithmetic every backend runs inside its atomic claim, with the
broker's clock (the Redis Lua script mirrors it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0, "d": 86400.0}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*\Z")
MAX_KEY_TEXT = 200  # a limiter key value longer than this is refused (it names Redis keys)
_INF = float("inf")
MAX_N = 2**31 - 1  # largest concurrency limit (a slot count any backend stores as an integer)
#: not allowed in a limiter key: group/slot separators, control characters (C0, DEL, C1: a
#: key is shown by ``conveyor limits`` and the dashboard) and lone surrogates (not UTF-8)
NOT_PLAIN = re.compile(r"[{}|\x00-\x1f\x7f-\x9f\ud800-\udfff]")
KeyFn = Callable[..., Any]


def parse_rate(text: object, field_name: str = "rate_limit") -> tuple[float, float]:
    """``"10/s"``, ``"100/m"``, ``"5/10s"``, ``"1000/h"`` -> (tokens, per seconds)."""
    if not isinstance(text, str):
        raise ValidationError(field_name, f"must be a string like '10/s', got {text!r}")
    m = _RATE_RE.match(text.lower())
    if m is None or m.group(3) not in _UNITS:
        raise ValidationError(field_name, f"{text[:50]!r} must look like '10/s', '100/m', '5/10s'")
    tokens = float(m.group(1))
    per = float(m.group(2) or 1) * _UNITS[m.group(3)]
    if tokens <= 0 or per <= 0:
        raise ValidationError(field_name, f"{text[:50]!r}: the rate must be positive")
    if tokens == _INF or per == _INF:  # 400 digits: a bucket that never refills, or NaN sums
        raise ValidationError(field_name, f"{text[:50]!r}: the count and period must be finite")
    return tokens, per


def _check_key(key: object, field_name: str) -> str | KeyFn | None:
    if key is None or callable(key):
        return key
    if isinstance(key, str) and key.isidentifier():
        return key
    raise ValidationError(field_name, "key must be an argument name or a callable over the args")


@dataclass(frozen=True)
class RateLimit:
    """``RateLimit("100/m", key="customer_id", burst=20)``: a token bucket (per key value)."""

    rate: str
    key: str | KeyFn | None = None
    burst: float | None = None

    def __post_init__(self) -> None:
        parse_rate(self.rate)
        _check_key(self.key, "rate_limit")
        if self.burst is not None and (
            isinstance(self.burst, bool)
            or not isinstance(self.burst, int | float)
            or not 1 <= self.burst < float("inf")
        ):
            raise ValidationError("burst", f"must be a number >= 1, got {self.burst!r}")

    def bucket(self) -> tuple[float, float, float]:
        """(tokens, per seconds, burst)."""
        tokens, per = parse_rate(self.rate)
        return tokens, per, float(self.burst if self.burst is not None else max(1.0, tokens))


@dataclass(frozen=True)
class ConcurrencyLimit:
    """``ConcurrencyLimit(1, key="account_id")``: at most ``n`` running per key, anywhere."""

    n: int
    key: str | KeyFn | None = None

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= MAX_N:
            raise ValidationError(
                "concurrency", f"must be an integer from 1 to {MAX_N}, got {self.n!r:.40}"
            )
        _check_key(self.key, "concurrency")


@dataclass(frozen=True)
class TaskFlow:
    """The flow control of one task (None fields: not limited that way)."""

    rate_limit: RateLimit | None = None
    concurrency: ConcurrencyLimit | None = None
    fair_by: str | KeyFn | None = None


def task_flow(rate_limit: object, concurrency: object, fair_by: object) -> TaskFlow | None:
    """Validate the decorator's arguments; None when the task has no flow control at all."""
    if rate_limit is None and concurrency is None and fair_by is None:
        return None
    rate = RateLimit(rate_limit) if isinstance(rate_limit, str) else rate_limit
    if rate is not None and not isinstance(rate, RateLimit):
        raise ValidationError("rate_limit", "must be a string like '10/s' or a RateLimit")
    conc = ConcurrencyLimit(concurrency) if isinstance(concurrency, int) else concurrency
    if conc is not None and not isinstance(conc, ConcurrencyLimit):
        raise ValidationError("concurrency", "must be an integer or a ConcurrencyLimit")
    return TaskFlow(rate, conc, _check_key(fair_by, "fair_by"))


def key_value(
    key: str | KeyFn,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    params: Sequence[str],
    field_name: str = "key",
    defaults: Mapping[str, Any] | None = None,
) -> str:
    """The text of a limiter key for one job: an argument's value (its default when the job
    leaves it out), or the callable's result. Anything that goes wrong is a ``ValidationError``
    naming ``field_name`` (``rate_limit``, ``concurrency``, ``fair_by``)."""
    if callable(key):
        name = getattr(key, "__name__", "key")
        try:
            value = key(*args, **kwargs)
        except Exception as exc:
            raise ValidationError(
                field_name, f"the key {name}() raised {type(exc).__name__}: {_said(exc)}"
            ) from exc
    else:
        name = key
        if key in kwargs:
            value = kwargs[key]
        elif key in params and params.index(key) < len(args):
            value = args[params.index(key)]
        elif defaults is not None and key in defaults:
            value = defaults[key]
        else:
            raise ValidationError(field_name, f"key {key!r} names no argument the job has")
    try:
        text = f"{name}={value}"
    except Exception as exc:
        raise ValidationError(
            field_name, f"key {name}: str() raised {type(exc).__name__} on its value"
        ) from exc
    if len(text) > MAX_KEY_TEXT or NOT_PLAIN.search(text):
        raise ValidationError(
            field_name,
            f"key {name}: values must be plain text of at most {MAX_KEY_TEXT} characters"
            f" (no control characters, {{, }} or |), got {text[:60]!r}",
        )
    return text


def _said(exc: BaseException) -> str:
    try:
        return str(exc)[:200]
    except Exception:
        return "<str() failed>"


def job_flow(
    task: str,
    flow: TaskFlow,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    params: Sequence[str],
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``flow`` record of one job of ``task`` (see the module docstring); ``defaults``:
    the function's parameter defaults, for a key argument the job leaves out."""
    record: dict[str, Any] = {}
    parts: list[str] = []
    if flow.rate_limit is not None:
        r = flow.rate_limit
        name = f"rate:{task}" + (
            f":{key_value(r.key, args, kwargs, params, 'rate_limit', defaults)}" if r.key else ""
        )
        record["r"] = [[name, *r.bucket()]]
        parts.append(name)
    if flow.concurrency is not None:
        c = flow.concurrency
        name = f"conc:{task}" + (
            f":{key_value(c.key, args, kwargs, params, 'concurrency', defaults)}" if c.key else ""
        )
        record["c"] = [[name, c.n]]
        parts.append(name)
    if flow.fair_by is not None:
        parts.append(f"fair:{key_value(flow.fair_by, args, kwargs, params, 'fair_by', defaults)}")
    record["g"] = "|".join(parts)
    return record


def with_queue(record: dict[str, Any] | None, queue: str, flow: TaskFlow) -> dict[str, Any]:
    """``record`` (or none) plus the limits of its queue (``app.queue(name, rate_limit=...,
    concurrency=...)``: limiters ``rate:@<queue>`` / ``conc:@<queue>``, shared by every job of
    the queue)."""
    out: dict[str, Any] = {k: v for k, v in (record or {}).items()}
    parts = [p for p in str(out.get("g", "")).split("|") if p]
    if flow.rate_limit is not None:
        name = f"rate:@{queue}"
        out["r"] = [*out.get("r", []), [name, *flow.rate_limit.bucket()]]
        parts.append(name)
    if flow.concurrency is not None:
        name = f"conc:@{queue}"
        out["c"] = [*out.get("c", []), [name, flow.concurrency.n]]
        parts.append(name)
    out["g"] = "|".join(parts)
    return out


UNIQUE_MODES = ("while_queued", "while_running", "until_done")
UNIQUE_TTL = 30 * 86400.0  # a unique key outlives any realistic wait; its job's state decides
_WAITING = ("pending", "scheduled", "retry_scheduled")
_TERMINAL = ("completed", "dead_letter", "cancelled", "expired")
#: The idempotency keys of ``unique=`` and ``debounce=`` jobs start so; a caller's own key may not.
RESERVED_KEY_PREFIXES = ("unique:", "debounce:")


def unique_idempotency_key(mode: str, key: str) -> str:
    """The idempotency key that carries a ``unique=`` job (the brokers' dedup machinery)."""
    return f"unique:{mode}:{key}"


def unique_holds(key: str, state: str | None) -> bool:
    """Does a live idempotency ``key`` still deduplicate, given its job's ``state``?

    ``unique:while_queued:``: only while that job waits; ``unique:until_done:``: until it
    finishes; any other key: for its whole TTL (plain idempotency keys).
    """
    if key.startswith(("unique:while_queued:", "debounce:")):
        return state in _WAITING
    if key.startswith("unique:until_done:"):
        return state is not None and state not in _TERMINAL
    return True


def with_unique_slot(record: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """``record`` plus a concurrency slot of 1 for a ``while_running`` unique key: a second
    job with the key waits until the first finishes."""
    out: dict[str, Any] = dict(record or {})
    name = f"conc:unique:{key}"
    out["c"] = [*out.get("c", []), [name, 1]]
    out["g"] = "|".join(p for p in (str(out.get("g", "")), name) if p)
    return out


def stagger(next_at: float, behind: dict[str, int], name: str, rate: float, per: float) -> float:
    """When a claim looks again at a group whose bucket ``name`` has no token: the next token,
    plus one token's time per group the same claim already set aside for that bucket
    (``behind``). A bucket shared by many groups (a task-wide limit with ``fair_by``) then
    makes one group due per token, where all of them were due at the next one and each claim
    looked at every one and set it aside again (memlimits.py, sqllimits.py, _flow.lua)."""
    return next_at + behind.get(name, 0) * per / rate


def bucket_take(
    state: tuple[float, float] | None, rate: float, per: float, burst: float, now: float
) -> tuple[bool, tuple[float, float], float]:
    """One token from a bucket: (taken, new state (tokens, at), when the next token exists).

    ``state`` None: a full bucket. Tokens refill continuously at ``rate / per`` a second.
    """
    tokens, at = state if state is not None else (burst, now)
    tokens = min(burst, tokens + max(0.0, now - at) * rate / per)
    if tokens >= 1.0:
        return True, (tokens - 1.0, now), now
    return False, (tokens, now), now + (1.0 - tokens) * per / rate


def limiter_base(name: str) -> str:
    """The limiter a bucket or slot belongs to: ``rate:task:customer_id=7`` -> ``rate:task``."""
    return ":".join(name.split(":", 2)[:2])


def is_queue_limiter(name: str) -> bool:
    """A limit of a whole queue (``app.queue(name, rate_limit=, concurrency=)``): every group
    of the queue waits on it, so when it says no, nothing else in the queue may start either
    and a claim stops there instead of setting every group aside one by one."""
    return name.startswith(("rate:@", "conc:@"))


def limiter_label(name: str, spec: Sequence[Any] | None = None) -> str:
    """How an operator reads a limiter: ``rate:partner`` + ``10/s`` -> "partner:10/s"."""
    kind, _, rest = name.partition(":")
    if kind == "conc":
        return rest.split(":", 1)[-1]  # "account_id=42" (or the task, for a global limit)
    if kind == "rate" and spec:
        tokens, per = float(spec[0]), float(spec[1])
        unit = {1.0: "s", 60.0: "m", 3600.0: "h", 86400.0: "d"}.get(per, f"{per:g}s")
        return f"{rest}:{tokens:g}/{unit}"
    return rest


MAX_LIMITER_NAME = 1000  # a stored limiter name longer than this was not written by Conveyor


def flow_problem(flow: object) -> str | None:
    """Why a stored ``flow`` record is not of the shape ``job_flow`` writes, or None if it is.

    A record read back from storage may have been written by anything (issue 15: one corrupt
    or hostile job must not make every claim of its queue raise): ``g`` a string, ``c`` a list
    of ``[name, limit]`` (an integer >= 1), ``r`` a list of ``[name, rate, per, burst]``
    (rate and per > 0, burst >= 1). Every backend dead-letters such a job (``decode_error``).
    """
    if type(flow) is not dict or type(flow.get("g")) is not str:
        return "flow must be an object with a string group 'g'"
    slots, buckets = flow.get("c"), flow.get("r")
    if slots is not None and (type(slots) is not list or not all(_slot_ok(item) for item in slots)):
        return "flow 'c' must be a list of [name, limit >= 1] pairs"
    if buckets is not None and (
        type(buckets) is not list or not all(_bucket_ok(item) for item in buckets)
    ):
        return "flow 'r' must be a list of [name, rate > 0, per > 0, burst >= 1]"
    return None


def _name_ok(name: object) -> bool:
    return type(name) is str and 0 < len(name) <= MAX_LIMITER_NAME


def _slot_ok(item: object) -> bool:
    return (
        type(item) is list
        and len(item) == 2
        and _name_ok(item[0])
        and type(item[1]) is int
        and item[1] >= 1
    )


def _bucket_ok(item: object) -> bool:
    if type(item) is not list or len(item) != 4 or not _name_ok(item[0]):
        return False
    rate, per, burst = item[1:]
    if not all(type(v) in (int, float) and v < float("inf") for v in (rate, per, burst)):
        return False
    return bool(rate > 0 and per > 0 and burst >= 1)
