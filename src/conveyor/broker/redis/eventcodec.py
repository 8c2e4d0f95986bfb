"""Redis event-stream entries as event dicts: flat job events and batch entries of one script.

Split out of ``broker/redis/codec.py`` (which re-exports ``event_from_fields`` and
``events_from_entry``). Job events store no queue (it is the stream's); a batch entry (fields
``jobs`` and ``fields``, written by ``emit_many`` in ``_lib.lua``) stands for one event per job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

_EVENT_FLOATS = ("at", "run_at")
_EVENT_INTS = ("attempt", "lost")


def event_from_fields(fields: Mapping[bytes, bytes], queue: str | None) -> dict[str, Any]:
    """A stream entry as an event dict (job events are flat fields; others one JSON field).

    Job events do not store their queue: it is the stream's, passed as ``queue``.
    """
    if b"event" in fields:
        value = orjson.loads(fields[b"event"])
        return value if isinstance(value, dict) else {"type": "unknown", "value": value}
    event: dict[str, Any] = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
    if queue is not None:
        event.setdefault("queue", queue)
    for name in _EVENT_FLOATS:
        if name in event:
            event[name] = _number(event[name], float)
    for name in _EVENT_INTS:
        if name in event:
            event[name] = _number(event[name], int)
    return event


def events_from_entry(fields: Mapping[bytes, bytes], queue: str | None) -> list[dict[str, Any]]:
    """The events of one stream entry: usually one; a batch entry (field ``jobs``, written by
    ``emit_many`` in ``_lib.lua``) stands for one event per job of one script call."""
    raw = fields.get(b"jobs")
    if raw is None:
        return [event_from_fields(fields, queue)]
    try:
        columns = fields.get(b"fields", b"").decode().split()
        values = _rows(raw)
        if not columns or not isinstance(values, list) or len(values) % len(columns):
            raise ValueError("malformed batch entry")
    except (ValueError, UnicodeDecodeError):
        return [event_from_fields(fields, queue)]
    shared = event_from_fields({k: v for k, v in fields.items() if k not in _BATCH_FIELDS}, queue)
    width = len(columns)
    out = []
    for start in range(0, len(values), width):
        event = dict(shared)
        for name, value in zip(columns, values[start : start + width], strict=True):
            if name in _EVENT_INTS:
                value = _number(str(value), int)
            elif not isinstance(value, str):
                value = str(value)
            event[name] = value
        out.append(event)
    return out


_BATCH_FIELDS = (b"jobs", b"fields")


def _rows(raw: bytes) -> Any:
    """A batch entry's rows. The scripts copy an id or task from a stored envelope as it
    stands, so a planted one may bring a raw control character or bytes that are not UTF-8
    (orjson refuses both): those are read leniently rather than lose every row of the call."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8", "replace"), strict=False)


def _number(text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        try:
            return kind(float(text))
        except ValueError:
            return text
