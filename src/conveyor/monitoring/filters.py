"""Search filters and times typed by people: parsed and validated for the CLI, pages and API.

Everything an operator types (``since=15m``, ``state=dead_letter``, ``queue=...``) passes through
here, so a bad value is a ``ValidationError`` naming the field (422 on the API), never a crash.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..core.job import validate_queue_name, validate_task_name
from ..core.state import JobState
from ..errors import ValidationError

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])\Z")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
SEARCH_FIELDS = ("id", "state", "task", "queue", "since", "until", "error", "text")
#: Deepest search page anyone may ask for (CLI, pages, API): past it, SQLite's and
#: PostgreSQL's 64-bit OFFSET overflowed into a traceback.
MAX_PAGE = 1_000_000


def parse_time(value: Any, now: float, field: str = "since") -> float | None:
    """Epoch seconds from a number, an ISO 8601 string (naive = UTC) or an age like ``15m``."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValidationError(field, "must be a time, not a boolean")
    if isinstance(value, int | float):
        return _finite(float(value), field)
    text = str(value).strip()
    match = _RELATIVE.match(text)
    if match:
        return _finite(now - float(match.group(1)) * _UNITS[match.group(2)], field)
    try:
        return _finite(float(text), field)
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            raise
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValidationError(
            field,
            f"{text[:60]!r} is not an epoch number, an ISO 8601 time or an age like 30m / 2h / 1d",
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _finite(value: float, field: str) -> float:
    """``value`` unless NaN or infinite (a time filter must compare with real times)."""
    if not math.isfinite(value):
        raise ValidationError(field, "must be a finite time")
    return value


def clean_filters(filters: Mapping[str, Any], now: float) -> dict[str, Any]:
    """Validate search filters: known names only, empty values dropped, times parsed."""
    out: dict[str, Any] = {}
    for key, value in filters.items():
        if key not in SEARCH_FIELDS:
            raise ValidationError(key, f"unknown filter; use {', '.join(SEARCH_FIELDS)}")
        if value is None or value == "":
            continue
        if key in ("since", "until"):
            out[key] = parse_time(value, now, key)
        elif key == "queue":
            out[key] = validate_queue_name(value)
        elif key == "task":
            out[key] = validate_task_name(value)
        elif key == "state":
            try:
                out[key] = JobState(str(value))
            except ValueError as exc:
                raise ValidationError(
                    "state", f"must be one of {[s.value for s in JobState]}"
                ) from exc
        else:
            if not isinstance(value, str) or len(value) > 500:
                raise ValidationError(key, "must be a string of at most 500 characters")
            out[key] = value
    return out
