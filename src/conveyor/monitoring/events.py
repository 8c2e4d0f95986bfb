"""Typed job and worker events, and a reader that follows the broker's event stream.

Every broker appends an event on each job transition (``enqueued``, ``started``, ``completed``,
``failed``, ``retry_scheduled``, ``dead_lettered``, ``cancelled``, ``requeued``, ``released``,
``lease_lost``) to a bounded stream (Redis Stream, SQLite table, ring buffer in memory); workers
add ``worker_up`` / ``worker_down``. ``EventReader`` reads it from any process and keeps a
resumable cursor, so a consumer that restarts with the saved cursor misses nothing still kept.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..broker.side import SideStores
from ..errors import ValidationError

_BASE_FIELDS = ("type", "job_id", "queue", "task", "at", "cursor")


class EventType(StrEnum):
    """The kinds of event in the stream (``broker.base.EVENT_TYPES``)."""

    ENQUEUED = "enqueued"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    RETRY_SCHEDULED = "retry_scheduled"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"
    RELEASED = "released"
    LEASE_LOST = "lease_lost"
    WORKER_UP = "worker_up"
    WORKER_DOWN = "worker_down"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class JobEvent:
    """One entry of the stream. ``data`` holds the type-specific fields (attempt, error, ...)."""

    type: EventType
    at: float
    cursor: str = ""
    job_id: str | None = None
    queue: str | None = None
    task: str | None = None
    raw_type: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> JobEvent:
        """Build an event from what ``SideStores.events.read`` returns (unknown types are kept)."""
        name = str(raw.get("type", ""))
        try:
            kind = EventType(name)
        except ValueError:
            kind = EventType.UNKNOWN
        at = raw.get("at")
        return cls(
            type=kind,
            at=float(at) if isinstance(at, int | float | str) and _is_number(at) else 0.0,
            cursor=str(raw.get("cursor", "")),
            job_id=_opt_str(raw.get("job_id")),
            queue=_opt_str(raw.get("queue")),
            task=_opt_str(raw.get("task")),
            raw_type=name,
            data={k: v for k, v in raw.items() if k not in _BASE_FIELDS},
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the shape the HTTP API and ``--json`` print)."""
        out: dict[str, Any] = {
            "type": self.raw_type or str(self.type),
            "at": self.at,
            "cursor": self.cursor,
        }
        for key in ("job_id", "queue", "task"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out.update(self.data)
        return out


#: The shapes of the cursors brokers hand out: a sequence number (memory, SQLite) or, on Redis,
#: ``<stream>@<entry id>[/<k>]`` items joined by commas. Anything else is refused up front.
_CURSOR_ITEM = r"[^,@\s]{1,200}@\d{1,19}-\d{1,19}(?:/\d{1,9})?"
_CURSOR_RE = re.compile(rf"\d{{1,18}}|{_CURSOR_ITEM}(?:,{_CURSOR_ITEM})*")


def check_cursor(cursor: object, field: str = "after") -> str | None:
    """``cursor`` if it has the shape of an event cursor (None/empty: from the start)."""
    if cursor is None or cursor == "":
        return None
    if not isinstance(cursor, str) or len(cursor) > 20_000 or not _CURSOR_RE.fullmatch(cursor):
        raise ValidationError(
            field, "is not an event cursor (pass back the `cursor` you were given)"
        )
    return cursor


class EventReader:
    """Follows the event stream from a cursor; ``cursor`` is what to save to resume later."""

    def __init__(self, broker: SideStores, cursor: str | None = None) -> None:
        self.broker = broker
        self.cursor = check_cursor(cursor, "cursor")

    def read(self, limit: int = 100) -> list[JobEvent]:
        """The next events after the cursor (oldest first), advancing the cursor past them."""
        raw, cursor = self.broker.events.read(self.cursor, limit)
        self.cursor = cursor
        return [JobEvent.from_dict(e) for e in raw]

    def read_all(self, batch: int = 1000, max_events: int = 100_000) -> Iterator[JobEvent]:
        """Every event after the cursor, in batches, until the stream is exhausted."""
        seen = 0
        while seen < max_events:
            events = self.read(batch)
            if not events:
                return
            seen += len(events)
            yield from events
            if len(events) < batch:
                return

    def seek_end(self) -> str | None:
        """Move the cursor past every event kept now (to follow only new ones); return it."""
        for _ in self.read_all():
            pass
        return self.cursor


def job_events(broker: SideStores, job_id: str, max_scan: int = 20_000) -> list[JobEvent]:
    """The events of one job still kept in the stream, oldest first (scans the stream)."""
    reader = EventReader(broker)
    return [e for e in reader.read_all(max_events=max_scan) if e.job_id == job_id]


def worker_event(kind: EventType | str, worker_id: str, at: float, **data: Any) -> dict[str, Any]:
    """A ``worker_up`` / ``worker_down`` event ready for ``SideStores.events.add``."""
    if str(kind) not in (EventType.WORKER_UP, EventType.WORKER_DOWN):
        raise ValueError(f"worker_event: {kind!r} is not worker_up or worker_down")
    return {"type": str(kind), "worker": worker_id, "at": at, **data}


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def __getattr__(name: str) -> object:
    """``Event`` was this module's name for ``JobEvent``; kept as a deprecated alias.

    Renamed so it no longer clashes with ``conveyor.core.state.Event`` (state-machine events).
    """
    if name == "Event":
        warnings.warn(
            "conveyor.monitoring.events.Event is deprecated; use JobEvent",
            DeprecationWarning,
            stacklevel=2,
        )
        return JobEvent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
