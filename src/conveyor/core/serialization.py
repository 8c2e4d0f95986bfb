"""The wire format: a versioned JSON envelope (orjson) with typed extensions; no pickle.

Values allowed in args, kwargs, results and metadata: None, bool, int, float, str, list/tuple
(tuples come back as lists), dict with str keys, and these typed extensions, which round-trip
exactly and are written as one-key objects so other languages can read them:

=============  ==========================================
``datetime``   ``{"$dt": "2024-01-02T03:04:05.000006+00:00"}`` (naive ones stay naive)
``date``       ``{"$date": "2024-01-02"}``
``Decimal``    ``{"$dec": "1.10"}``
``UUID``       ``{"$uuid": "…"}``
``bytes``      ``{"$b64": "…"}`` (standard base64)
=============  ==========================================

A user dict whose only key is one of those tags (or ``$map``) is wrapped as ``{"$map": {...}}``
so it can never be mistaken for a typed value. Anything else is refused with a
``ValidationError`` naming the argument and its type. See docs/wire-format.md.

The values themselves are encoded and decoded in ``core/values.py`` (re-exported here); this
module writes and reads the envelope of a whole job.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from ..errors import DecodeError, PayloadTooLarge, ValidationError
from .flow import flow_problem
from .job import Job, is_utf8
from .state import JobState
from .values import MAX_RESULT_BYTES as MAX_RESULT_BYTES  # re-exported (values.py)
from .values import decode_value as decode_value
from .values import dumps as dumps
from .values import encode_args as encode_args
from .values import encode_kwargs as encode_kwargs
from .values import encode_value as encode_value
from .values import loads as loads
from .values import result_problem as result_problem

ENVELOPE_VERSION = 1
MAX_PAYLOAD_BYTES = 1024 * 1024
_REQUIRED = ("id", "task", "queue", "state")


def job_to_dict(job: Job) -> dict[str, Any]:
    """The envelope of ``job`` as a JSON-ready dict (args, kwargs, result typed-encoded)."""
    data: dict[str, Any] = {
        "v": ENVELOPE_VERSION,
        "id": job.id,
        "task": job.task,
        "args": encode_value(job.args, "args"),
        "kwargs": encode_value(job.kwargs, "kwargs"),
        "queue": job.queue,
        "priority": job.priority,
        "state": str(job.state),
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "timeout": job.timeout,
        "run_at": job.run_at,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "result": encode_value(job.result, "result"),
        "last_error": job.last_error,
        "errors": job.errors,
        "history": job.history,
        "idempotency_key": job.idempotency_key,
        "idempotency_ttl": job.idempotency_ttl,
        "metadata": encode_value(job.metadata, "metadata"),
        "lost": job.lost,
        "worker_id": job.worker_id,
        "lease_expires_at": job.lease_expires_at,
    }
    for name in _CLASSIFICATION:
        if (value := getattr(job, name, None)) is not None:
            data[name] = value
    if (expires_at := getattr(job, "expires_at", None)) is not None:  # issue 15: when set
        data["expires_at"] = expires_at
    if (flow := getattr(job, "flow", None)) is not None:
        data["flow"] = flow
    return data


_OPTIONAL = (
    "timeout",
    "started_at",
    "finished_at",
    "last_error",
    "idempotency_key",
    "worker_id",
    "lease_expires_at",
    "expires_at",
    "flow",
)
_DEFAULT_TTL = 300.0
_CLASSIFICATION = ("retry_on", "dead_on")  # per-job overrides: written only when set


def exception_names(value: Any, field_name: str) -> list[str] | None:
    """A stored ``retry_on`` / ``dead_on``: None, or a list of strings; else ``DecodeError``."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DecodeError(f"{field_name} must be a list of exception names")
    return value


def envelope_dict(job: Job) -> dict[str, Any]:
    """The compact envelope of ``job``: required fields plus the ones that differ from defaults.

    Decodes (``job_from_dict``) to the same Job as ``job_to_dict``; it is what brokers store.
    """
    f = job.__dict__  # plain reads of the dataclass fields (this runs once per enqueued job)
    data: dict[str, Any] = {
        "v": ENVELOPE_VERSION,
        "id": f["id"],
        "task": f["task"],
        "args": encode_args(f["args"]),
        "kwargs": encode_kwargs(f["kwargs"]),
        "queue": f["queue"],
        "priority": f["priority"],
        "state": f["state"],  # a JobState: orjson writes its value
        "max_attempts": f["max_attempts"],
        "run_at": f["run_at"],
        "created_at": f["created_at"],
    }
    for name in _OPTIONAL:
        value = f.get(name)
        if value is not None:
            data[name] = value
    if f["idempotency_key"] is not None or f["idempotency_ttl"] != _DEFAULT_TTL:
        data["idempotency_ttl"] = f["idempotency_ttl"]
    if f["metadata"]:
        data["metadata"] = encode_value(f["metadata"], "metadata")
    if f["result"] is not None:
        data["result"] = encode_value(f["result"], "result")
    for name in ("attempts", "lost", "errors", "history"):
        if value := f[name]:
            data[name] = value
    for name in _CLASSIFICATION:
        if (value := f.get(name)) is not None:
            data[name] = value
    return data


def encode_envelope(job: Job, limit: int = MAX_PAYLOAD_BYTES) -> bytes:
    """The compact envelope bytes (validated); ``PayloadTooLarge`` over ``limit``.

    ``Conveyor.enqueue_many`` encodes each job once with this and hands the bytes to the
    broker, which stores them as they are.
    """
    try:
        data = orjson.dumps(envelope_dict(job))
    except (TypeError, RecursionError) as exc:
        raise unencodable(job) from exc
    if len(data) > limit:
        raise PayloadTooLarge(len(data), limit)
    return data


def encode_job(job: Job, limit: int = MAX_PAYLOAD_BYTES) -> bytes:
    """Serialise ``job`` to envelope bytes; raise ``PayloadTooLarge`` over ``limit``."""
    try:
        data = orjson.dumps(job_to_dict(job))
    except (TypeError, RecursionError) as exc:
        raise unencodable(job) from exc
    if len(data) > limit:
        raise PayloadTooLarge(len(data), limit)
    return data


_CHECKED = ("id", "task", "queue", "idempotency_key", "args", "kwargs", "metadata", "result")


def unencodable(job: Job) -> ValidationError:
    """The ``ValidationError`` for a job orjson refused: the field and the value that broke it.

    Only the failure path runs this. orjson refuses strings with lone surrogates and nesting over
    255 levels (``encode_value`` may hit Python's recursion limit first); the walk below is
    iterative, so any depth is diagnosed.
    """
    for name in _CHECKED:
        value = getattr(job, name)
        try:
            orjson.dumps(encode_value(value, name))
        except ValidationError as exc:
            return exc
        except (TypeError, RecursionError):
            return ValidationError(*_locate(value, name))
    return ValidationError("job", "cannot be encoded as JSON")


def _locate(value: Any, path: str) -> tuple[str, str]:
    """(path, rule) of the first string that is not valid UTF-8, else a nesting complaint."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not is_utf8(item):
                return where, "strings must be valid UTF-8 (no lone surrogates)"
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key, v in reversed(list(item.items())):
                if isinstance(key, str) and not is_utf8(key):
                    return where, "keys must be valid UTF-8 (no lone surrogates)"
                stack.append((v, f"{where}[{key!r}]"))
    return path, "nests too deeply to be encoded as JSON (at most 255 levels)"


def job_from_dict(data: Any) -> Job:
    """Build a Job from an envelope dict; raise ``DecodeError`` on anything malformed."""
    if not isinstance(data, dict):
        raise DecodeError("envelope must be a JSON object")
    if data.get("v") != ENVELOPE_VERSION:
        raise DecodeError(f"unsupported envelope version {data.get('v')!r}")
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        raise DecodeError(f"envelope is missing fields: {', '.join(missing)}")
    try:
        return Job.fast(_job_values(data))
    except (TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"malformed envelope field: {exc}") from exc


def _job_values(data: dict[str, Any]) -> dict[str, Any]:
    """Every field of the Job of envelope ``data``: a copy of ``_JOB_TEMPLATE`` (copying a
    dict is several times cheaper than building a 28-key one; this runs per decoded job) with
    each field set from ``data``; an optional field stored as null keeps its default, None."""
    get = data.get
    values = _JOB_TEMPLATE.copy()
    values["id"] = str(data["id"])
    values["task"] = str(data["task"])
    values["args"] = list(decode_value(get("args") or []))
    values["kwargs"] = dict(decode_value(get("kwargs") or {}))
    values["queue"] = str(data["queue"])
    values["priority"] = int(get("priority", 0))
    values["state"] = JobState(data["state"])
    values["attempts"] = int(get("attempts", 0))
    values["max_attempts"] = int(get("max_attempts", 4))
    values["run_at"] = float(get("run_at") or 0.0)
    values["created_at"] = float(get("created_at") or 0.0)
    values["last_error"] = get("last_error")
    values["errors"] = list(get("errors") or [])
    values["history"] = list(get("history") or [])
    values["idempotency_key"] = get("idempotency_key")
    values["idempotency_ttl"] = float(get("idempotency_ttl") or 300.0)
    values["metadata"] = dict(decode_value(get("metadata") or {}))
    values["lost"] = int(get("lost", 0))
    values["worker_id"] = get("worker_id")
    for name in _OPT_FLOATS:
        if (value := get(name)) is not None:
            values[name] = float(value)
    if (result := get("result")) is not None:
        values["result"] = decode_value(result)
    if (retry_on := get("retry_on")) is not None:
        values["retry_on"] = exception_names(retry_on, "retry_on")
    if (dead_on := get("dead_on")) is not None:
        values["dead_on"] = exception_names(dead_on, "dead_on")
    if (flow := get("flow")) is not None:
        values["flow"] = _flow(flow)
    return values


#: Every Job field, None: ``_job_values`` sets the ones that are not None when stored null
_JOB_TEMPLATE: dict[str, Any] = dict.fromkeys(f.name for f in dataclasses.fields(Job))
#: Optional number fields: None when null or absent.
_OPT_FLOATS = ("timeout", "started_at", "finished_at", "lease_expires_at", "expires_at")


def decode_job(raw: bytes | str) -> Job:
    """Parse envelope bytes into a Job; the only error raised is ``DecodeError``."""
    try:
        data = orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from exc
    return job_from_dict(data)


def _flow(value: Any) -> dict[str, Any] | None:
    """A stored ``flow`` record: None or one of the shape ``job_flow`` writes (``flow_problem``)."""
    if value is None:
        return None
    if (problem := flow_problem(value)) is not None:
        raise DecodeError(problem)
    return value  # type: ignore[no-any-return]
