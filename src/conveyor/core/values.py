"""Typed values <-> plain JSON data: what args, kwargs, results and metadata may hold.

Split out of ``core/serialization.py`` (which re-exports every public name here; the envelope
of a whole job stays there). ``encode_value`` turns datetimes, dates, Decimals, UUIDs and bytes
into one-key tagged objects (``{"$dt": ...}``; a user dict that looks like one is wrapped in
``$map``) and refuses anything else with a ``ValidationError`` naming the path;
``decode_value`` reverses it. ``encode_args`` / ``encode_kwargs`` skip the walk for flat JSON
scalars (the producer's hot path). See docs/wire-format.md.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import sys
import uuid
from typing import Any

import orjson

from ..errors import DecodeError, ValidationError

MAX_RESULT_BYTES = 1024 * 1024  # default cap on a stored result (Settings.max_result_bytes)
#: Deepest result stored, in levels of JSON arrays and objects once encoded (``[[]]`` is 2): a
#: stored job wraps its result in one or two more levels and orjson reads and writes at most 255,
#: so a deeper result could be stored but not read back on some backends.
MAX_RESULT_DEPTH = 250
_TAGS = ("$dt", "$date", "$dec", "$uuid", "$b64", "$map")


def encode_value(value: Any, path: str) -> Any:
    """Turn ``value`` into plain JSON data, raising ``ValidationError`` naming ``path``."""
    # Hot path (every enqueue encodes its args): JSON types are tested inline, in order of
    # frequency; the typed values and every error are in ``_encode_other``, off this path.
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:  # orjson (and most JSON readers) stop at 64 bits
            raise ValidationError(path, "integers must fit in 64 bits")
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValidationError(path, "NaN and infinity are not valid JSON numbers")
        return value
    if isinstance(value, list | tuple):
        return [encode_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return _encode_dict(value, path)
    return _encode_other(value, path)


def _encode_other(value: Any, path: str) -> Any:
    """The tagged form of a datetime, date, Decimal, UUID or bytes; anything else is refused."""
    if isinstance(value, dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    decimal = sys.modules.get("decimal")  # not imported: no Decimal exists (saves ~0.4 MB)
    if decimal is not None and isinstance(value, decimal.Decimal):
        return {"$dec": str(value)}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"$b64": base64.b64encode(bytes(value)).decode("ascii")}
    raise ValidationError(
        path,
        f"values of type {type(value).__name__} cannot be serialised; use JSON types,"
        " datetime, date, Decimal, UUID or bytes",
    )


def _encode_dict(value: dict[Any, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValidationError(path, f"dict keys must be strings, got {type(key).__name__}")
        out[key] = encode_value(item, f"{path}[{key!r}]")
    if len(out) == 1 and next(iter(out)) in _TAGS:
        return {"$map": out}
    return out


def result_problem(result: Any, limit: int = MAX_RESULT_BYTES) -> str | None:
    """Why a handler's ``result`` cannot be stored (None when it can).

    Runs the full encoding (typed values, then orjson) so a result that passes can never make
    the broker's ``complete`` fail or the stored job unreadable: lone surrogates, nesting over
    ``MAX_RESULT_DEPTH`` levels, and values over ``limit`` bytes once encoded are all caught
    here, before anything is written.
    """
    if result is None:
        return None
    try:
        encoded = orjson.dumps(encode_value(result, "result"))
    except ValidationError as exc:
        return str(exc)
    except RecursionError:
        return _TOO_DEEP
    except (TypeError, ValueError) as exc:  # orjson.JSONEncodeError is a TypeError
        if "Recursion limit" in str(exc):  # orjson's own depth limit (255)
            return _TOO_DEEP
        return f"result: cannot be encoded as JSON ({exc})"
    except Exception as exc:  # the value's own code raised (a tzinfo, a __str__, an __iter__)
        return f"result: encoding it raised {type(exc).__name__}: {_said(exc)}"
    size = len(encoded)
    if size > limit:
        return f"result: encoded result is {size} bytes, the limit is {limit} bytes"
    # fewer brackets than the limit cannot nest deeper than it: no scan on the common path
    brackets = encoded.count(b"[") + encoded.count(b"{") if size > MAX_RESULT_DEPTH else 0
    if brackets > MAX_RESULT_DEPTH and json_depth(encoded) > MAX_RESULT_DEPTH:
        return _TOO_DEEP
    return None


_TOO_DEEP = (
    f"result: nests too deeply (at most {MAX_RESULT_DEPTH} levels of arrays and objects"
    " once encoded, MAX_RESULT_DEPTH)"
)


def json_depth(encoded: bytes) -> int:
    """Levels of arrays and objects in the JSON text ``encoded`` (brackets in strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in encoded:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _said(exc: BaseException) -> str:
    """``str(exc)``, or a note when even that raises."""
    try:
        return str(exc)
    except Exception:
        return "<str() failed>"


def decode_value(value: Any) -> Any:
    """Inverse of ``encode_value``: plain JSON data back to Python values."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        tag, inner = next(iter(value.items()))
        if tag in _TAGS:
            return _decode_tagged(tag, inner)
    return {k: decode_value(v) for k, v in value.items()}


def _decode_tagged(tag: str, inner: Any) -> Any:
    try:
        if tag == "$map":
            return {k: decode_value(v) for k, v in inner.items()}
        if tag == "$dt":
            return dt.datetime.fromisoformat(inner)
        if tag == "$date":
            return dt.date.fromisoformat(inner)
        if tag == "$dec":
            from decimal import Decimal

            return Decimal(inner)
        if tag == "$uuid":
            return uuid.UUID(inner)
        return base64.b64decode(inner, validate=True)
    except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:
        raise DecodeError(f"bad {tag} value: {exc}") from exc


_INT_MIN, _INT_END = -(2**63), 2**64


def _plain(values: Any) -> bool:
    """True when every item is a JSON scalar that encodes as itself (no copy needed)."""
    for v in values:
        kind = type(v)
        if kind is str or kind is bool or v is None:
            continue
        if kind is int:
            if _INT_MIN <= v < _INT_END:
                continue
            return False
        if kind is float and v - v == 0.0:  # finite: NaN and infinities give NaN
            continue
        return False
    return True


def encode_args(args: Any, path: str = "args") -> Any:
    """``encode_value`` for a list or tuple, with a fast path for flat JSON scalars."""
    if type(args) in (list, tuple) and _plain(args):
        return args
    return encode_value(args, path)


def encode_kwargs(kwargs: Any, path: str = "kwargs") -> Any:
    """``encode_value`` for a dict, with a fast path for str keys and flat JSON scalars."""
    if type(kwargs) is not dict:
        return encode_value(kwargs, path)
    if not kwargs or (
        (len(kwargs) != 1 or next(iter(kwargs)) not in _TAGS)
        and all(type(k) is str for k in kwargs)
        and _plain(kwargs.values())
    ):
        return kwargs
    return encode_value(kwargs, path)


def dumps(value: Any) -> bytes:
    """JSON-encode plain data (schedules, events, metrics) with orjson."""
    return orjson.dumps(value)


def loads(raw: bytes | str) -> Any:
    """JSON-decode plain data with orjson."""
    return orjson.loads(raw)


# an integer of fewer digits always fits in 64 bits: orjson reads it exactly
_LONG_DIGITS = re.compile(rb"\d{19}")


def loads_exact(raw: bytes | str) -> Any:
    """``orjson.loads``, refusing an integer beyond 64 bits with a ``ValueError`` saying so:
    orjson reads one as a float without a word (``18446744073709551616`` became
    ``1.8446744073709552e+19``, another value), where ``enqueue`` refuses it from Python.
    Malformed JSON raises ``orjson.JSONDecodeError`` (a ``ValueError``) as before."""
    value = orjson.loads(raw)
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if _LONG_DIGITS.search(data):  # rare: read it again, integers checked (stdlib json)
        import contextlib
        import json

        # deeper than json's stack: orjson read it, the value is kept (nesting has its own rule)
        with contextlib.suppress(RecursionError):
            json.loads(data, parse_int=_int64)
    return value


def _int64(text: str) -> int:
    number = int(text)
    if not _INT_MIN <= number < _INT_END:
        raise ValueError(f"integers must fit in 64 bits, got {text[:40]}")
    return number
