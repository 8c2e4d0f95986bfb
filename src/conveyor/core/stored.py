"""Checks on envelopes read back from storage: what Conveyor could not have written is undecodable.

Every value Conveyor stores went through orjson, which refuses nesting deeper than 255 levels and
integers beyond 64 bits. A stored row that breaks those rules was written by someone else (a
hand-made producer, an attacker, a broken migration); decoding it would recurse without bound or
fail later, when the row is re-encoded inside a transaction. The brokers call these checks while
decoding and treat a failure like any other ``DecodeError`` (the job is dead-lettered as
``decode_error``), so one bad row never stops a claim. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import DecodeError

MAX_DEPTH = 255  # orjson's own limit when encoding
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what orjson can encode
_INT_FIELDS = ("priority", "attempts", "max_attempts", "lost")


def check_nesting(raw: bytes | str, data: Any) -> None:
    """Raise ``DecodeError`` if the decoded envelope ``data`` nests deeper than ``MAX_DEPTH``.

    Cheap on the hot path: a payload with at most ``MAX_DEPTH`` brackets cannot be too deep, so
    only payloads with more brackets are walked (iteratively, never recursing).
    """
    text = raw.encode() if isinstance(raw, str) else raw
    if text.count(b"[") + text.count(b"{") <= MAX_DEPTH:
        return
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise DecodeError(f"the envelope nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, dict | list))


def int_field(name: str, value: Any) -> int:
    """``value`` as an int, or ``DecodeError`` if it is outside the 64-bit range (the slow path
    of decoders that take an orjson ``int`` as it is: orjson gives ints only within range)."""
    if isinstance(value, int | float) and not _INT_MIN <= value <= _INT_MAX:
        raise DecodeError(f"{name}: {value!r} is outside the 64-bit integer range")
    return int(value)


def check_int_fields(data: Mapping[str, Any]) -> None:
    """Raise ``DecodeError`` if an integer field of an envelope exceeds 64 bits.

    orjson reads such a number as a float; the job's ``int()`` of it could not be written back.
    """
    for name in _INT_FIELDS:
        value = data.get(name)
        if isinstance(value, int | float) and not _INT_MIN <= value <= _INT_MAX:
            raise DecodeError(f"{name}: {value!r} is outside the 64-bit integer range")
