"""Check the options of ``Worker(...)`` / ``app.worker(...)`` as the CLI does.

A bad value is a ``ValidationError`` naming the option and the rule, raised before anything
starts: such values used to be clamped silently (``concurrency=0`` ran one slot) or taken as
given (a NaN or negative lease, a drain that never waits, ``max_jobs=-1`` recycling the worker
after its first job). ``None`` (and, for the counts that had it, 0) keeps the default.
"""

from __future__ import annotations

from ..core.job import MAX_DELAY, too_long
from ..errors import ValidationError
from .control import GROUP_PREFIX


def count(value: object, field_name: str, *, zero_is_default: bool = False) -> int | None:
    """An optional integer >= 1 (0 too with ``zero_is_default``: then None, the default)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(field_name, f"must be an integer >= 1, got {value!r:.40}")
    if value == 0:
        if zero_is_default:
            return None
        raise ValidationError(field_name, "must be an integer >= 1, got 0")
    return value


def seconds(value: object, field_name: str, *, zero_ok: bool) -> float | None:
    """Optional seconds: a finite number > 0 (>= 0 with ``zero_ok``)."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < float("inf")
        or (value == 0 and not zero_ok)
    ):
        rule = ">= 0" if zero_ok else "> 0"
        raise ValidationError(field_name, f"must be a finite number {rule}, got {value!r:.40}")
    if value > MAX_DELAY:  # Event.wait(1e99) raises OverflowError, as infinity did
        raise ValidationError(field_name, too_long(value))
    return float(value)


def identifier(value: object, field_name: str) -> str | None:
    """An optional process id (``worker_id``, a scheduler's ``id``): 1-200 printable
    characters. It is written in log lines, on the jobs a worker claims and in stored
    records, so control characters (a forged log line) and lone surrogates are refused."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 200 or not value.isprintable():
        shown = repr(value)[:40]
        raise ValidationError(field_name, f"must be 1-200 printable characters, got {shown}")
    return value


def worker_identifier(value: object) -> str | None:
    """``identifier`` for ``worker_id``, which must not start with ``group=``: that prefix
    names the control documents of worker groups (``control.group_key``), so such a worker
    would read a group's flag as its own and a command sent to it would reach the group."""
    checked = identifier(value, "worker_id")
    if checked is not None and checked.startswith(GROUP_PREFIX):
        raise ValidationError(
            "worker_id", f"must not start with {GROUP_PREFIX!r} (reserved for worker groups)"
        )
    return checked
