"""Per-call job options: the names ``enqueue`` accepts and their validation.

Split out of ``task.py`` (which re-exports ``check_options``, ``validate_time`` and
``datetime_to_epoch``). ``check_options`` refuses unknown names and bad values with a
``ValidationError`` naming the option, resolves ``max_retries`` and a datetime ``run_at``, and
checks the flow options of issue 15 (``unique``, ``unique_key``, ``debounce``, ``expires_in``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from .core.flow import UNIQUE_MODES
from .core.job import (
    validate_duration,
    validate_exception_names,
    validate_identifier,
    validate_max_attempts,
)
from .core.retry import max_attempts_from
from .errors import ValidationError

_OPTION_NAMES = frozenset(
    {
        "job_id",
        "queue",
        "priority",
        "idempotency_key",
        "idempotency_ttl",
        "delay",
        "run_at",
        "max_attempts",
        "max_retries",
        "timeout",
        "metadata",
        "retry_on",
        "dead_on",
        "expires_in",
        "unique",
        "unique_key",
        "debounce",
    }
)


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse unknown option names; resolve ``max_retries`` and datetime ``run_at``."""
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise ValidationError("options", f"unknown option(s): {', '.join(sorted(unknown))}")
    out = dict(options)
    if "max_retries" in out:
        out["max_attempts"] = max_attempts_from(None, out.pop("max_retries"))
    if out.get("max_attempts") is not None:
        validate_max_attempts(out["max_attempts"])
    run_at = out.get("run_at")
    if isinstance(run_at, dt.datetime):
        out["run_at"] = datetime_to_epoch(run_at, "run_at")
    elif run_at is not None:
        out["run_at"] = validate_time(run_at, "run_at")
    if out.get("delay") is not None:
        validate_duration(out["delay"], "delay")
    if out.get("idempotency_ttl") is not None:
        validate_duration(out["idempotency_ttl"], "idempotency_ttl")
    if out.get("timeout") is not None:
        validate_duration(out["timeout"], "timeout")
    _check_flow_options(out)
    for name in ("retry_on", "dead_on"):  # stored by qualified name (docs/wire-format.md)
        if out.get(name) is not None:
            out[name] = validate_exception_names(out[name], name)
    return out


def _check_flow_options(out: dict[str, Any]) -> None:
    """``unique`` / ``unique_key`` / ``expires_in`` (issue 15), in place."""
    if out.get("unique") is not None and out["unique"] not in UNIQUE_MODES:
        raise ValidationError("unique", f"must be one of {', '.join(UNIQUE_MODES)}")
    if out.get("debounce") is not None:
        if out.get("unique") is not None or out.get("idempotency_key") is not None:
            raise ValidationError("debounce", "cannot be combined with unique / idempotency_key")
        if out.get("delay") is not None or out.get("run_at") is not None:
            raise ValidationError(
                "debounce", "cannot be combined with delay / run_at (it sets the run time)"
            )
        if validate_duration(out["debounce"], "debounce") <= 0:
            raise ValidationError("debounce", "must be a number of seconds > 0")
    if out.get("unique_key") is not None:
        if out.get("unique") is None and out.get("debounce") is None:
            raise ValidationError("unique_key", "needs unique= (while_queued, ...)")
        validate_identifier(out["unique_key"], "unique_key")
    if out.get("unique") is not None and out.get("idempotency_key") is not None:
        raise ValidationError("unique", "cannot be combined with idempotency_key")
    if out.get("expires_in") is not None:
        out["expires_in"] = validate_duration(out["expires_in"], "expires_in")


def validate_time(value: object, field_name: str) -> float:
    """Epoch seconds given as a finite number (NaN and infinity are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(
            field_name,
            f"must be a timezone-aware datetime or epoch seconds, got {type(value).__name__}",
        )
    if value != value or value in (float("inf"), float("-inf")):
        raise ValidationError(field_name, f"must be a finite number, got {value!r}")
    return float(value)


def datetime_to_epoch(when: dt.datetime, field_name: str) -> float:
    """Epoch seconds of an aware datetime; naive datetimes are refused (ambiguous)."""
    if not isinstance(when, dt.datetime):
        raise ValidationError(field_name, f"must be a datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValidationError(field_name, "must be timezone-aware (e.g. datetime.now(UTC))")
    return when.timestamp()
