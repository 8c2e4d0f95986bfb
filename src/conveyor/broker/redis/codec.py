"""Job <-> Redis hash: the immutable JSON envelope plus the mutable fields the scripts update.

A job hash holds ``payload`` (the envelope written once at enqueue, ``core.serialization``) and
mutable fields that override it when present: ``state``, ``attempts``, ``lost`` (integers),
``run_at``, ``started_at``, ``finished_at``, ``lease_expires_at`` (epoch seconds),
``result`` (JSON), ``last_error``, ``worker_id`` (text), ``errors`` and ``history`` (JSON Lines),
and script bookkeeping: ``token``, ``rk`` (ready-set member), ``priority``, ``task``,
``created_at``, ``raw`` (original bytes of an undecodable payload). Lua never parses a payload on
the job's own path; only clear / purge do, to release an ``idempotency_key`` (``_lib.lua``).

Undecodable hashes are handled in ``salvage.py`` and event-stream entries decoded in
``eventcodec.py``; both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ...core.flow import flow_problem
from ...core.job import Job
from ...core.serialization import (
    ENVELOPE_VERSION,
    decode_value,
    encode_value,
    envelope_dict,
    exception_names,
)
from ...core.state import JobState
from ...core.stored import MAX_DEPTH, check_int_fields, check_nesting, int_field
from ...errors import DecodeError
from .claimjob import PLAIN_LEN as _PLAIN_LEN
from .claimjob import lines as _lines
from .claimjob import plain_job as _plain_job
from .eventcodec import event_from_fields as event_from_fields  # re-exported
from .eventcodec import events_from_entry as events_from_entry  # re-exported
from .salvage import UNDECODABLE_TASK as UNDECODABLE_TASK  # re-exported
from .salvage import decode_error_entry as decode_error_entry  # re-exported
from .salvage import salvage as salvage  # re-exported
from .salvage import stub_payload as stub_payload  # re-exported

_REQUIRED = ("id", "task", "queue", "state")
#: the hash values of claim.lua's reply for a fresh job (it sends none: first attempt)
_FRESH = (1, None, None, None, None, None)


def fmt_time(value: float) -> str:
    """A time as stored and passed to scripts: the shortest exact repr of the float."""
    return repr(float(value))


def pairs(flat: Sequence[Any]) -> dict[bytes, bytes]:
    """A flat HGETALL reply as a dict."""
    it = iter(flat)
    return dict(zip(it, it, strict=True))


def envelope(job: Job) -> bytes:
    """The immutable envelope stored in ``payloads``: ``core.serialization.encode_envelope``."""
    return orjson.dumps(envelope_dict(job))


_CLAIMED = (b"run_at", b"lost", b"errors", b"history", b"last_error")


def claimed_fields(
    item: Sequence[Any], started: str, deadline: str, worker_id: str
) -> tuple[str, dict[bytes, bytes]]:
    """(id, job hash fields) from one job of claim.lua's reply (nil fields left out)."""
    extra = item[3] or (1,)
    fields = {
        name: value for name, value in zip(_CLAIMED, extra[1:], strict=False) if value is not None
    }
    if item[2] is not None:
        fields[b"payload"] = item[2]
    fields[b"state"] = b"active"
    fields[b"attempts"] = str(extra[0]).encode()
    fields[b"token"] = item[1]
    fields[b"started_at"] = started.encode()
    fields[b"lease_expires_at"] = deadline.encode()
    fields[b"worker_id"] = worker_id.encode()
    return item[0].decode(), fields


def claim_hash_values(flat: list[Any] | None) -> dict[int, list[Any]] | None:
    """claim.lua's hash values of the claimed jobs that are not fresh: job number (1-based) ->
    ``[attempts, run_at, lost, errors, history, last_error]``; None when every job is fresh."""
    if not flat:
        return None
    return {flat[i]: flat[i + 1 : i + 7] for i in range(0, len(flat), 7)}


def run_fields(run: bytes) -> dict[bytes, bytes] | None:
    """The job hash fields an active job's run entry stands for (issue 18; the format is in
    keys.py and lua/_run.lua ``run_fields``): token, attempts, started_at, lease_expires_at,
    worker_id; None when it is not of that format."""
    head, sep, kept = run.partition(b"\n")
    parts = head.split(b"|", 3)
    if not sep or len(parts) != 4 or (values := kept_fields(kept)) is None:
        return None
    values[b"token"] = parts[0]
    values[b"lease_expires_at"] = parts[2]
    return values


def kept_fields(kept: bytes) -> dict[bytes, bytes] | None:
    """attempts, started_at, worker_id of ``"<attempts>|<started_at>|<worker_id>"``: the end of
    a run entry, which the completion keeps as the job hash's field ``run``."""
    parts = kept.split(b"|", 2)
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    return {b"attempts": parts[0], b"started_at": parts[1], b"worker_id": parts[2]}


def run_overlay(fields: dict[bytes, bytes], run: bytes | None) -> None:
    """Resolve the lease fields of a job hash ``fields`` (issue 18): an active job's run entry
    ``run`` (its hash has only the state) gives all of them; a job that completed keeps the
    end of its last entry as field ``run``, which gives started_at and worker_id, and attempts
    when the hash has no count of its own (a fresh job's first run)."""
    if run is not None and fields.get(b"state") == b"active":
        if (values := run_fields(run)) is not None:
            fields.update(values)
        return
    kept = fields.get(b"run")
    if kept is None or (values := kept_fields(kept)) is None:
        return
    fields[b"started_at"] = values[b"started_at"]
    fields[b"worker_id"] = values[b"worker_id"]
    fields.setdefault(b"attempts", values[b"attempts"])


def enqueue_fields(job: Job, now: float, grace: float) -> list[Any]:
    """The 11 values of a "full" job record of enqueue.lua after its id, payload and "f".

    state, priority, run_at, created_at, task, idempotency key ("" = none), key expiry, key PX,
    expires_at ("" = none), flow group and flow record JSON ("" = none; issue 15).
    An idempotency key is valid until ``now + ttl`` (checked against the caller's clock); Redis
    deletes it ``ttl + min(ttl, grace)`` real seconds after the enqueue, so keys cannot pile up.
    """
    key = job.idempotency_key
    expires = "" if job.expires_at is None else fmt_time(job.expires_at)
    flow = job.flow
    grp, record = ("", "") if flow is None else (flow["g"], orjson.dumps(flow).decode())
    if not key:
        return [
            str(job.state),
            job.priority,
            fmt_time(job.run_at),
            fmt_time(job.created_at),
            job.task,
            "",
            "",
            1,
            expires,
            grp,
            record,
        ]
    exp = fmt_time(now + job.idempotency_ttl)
    px = int((job.idempotency_ttl + min(grace, job.idempotency_ttl)) * 1000)
    return [
        str(job.state),
        job.priority,
        fmt_time(job.run_at),
        fmt_time(job.created_at),
        job.task,
        key,
        exp,
        max(px, 1),
        expires,
        grp,
        record,
    ]


def result_json(result: Any) -> bytes:
    """A handler's result as stored (typed-encoded JSON); None is stored as absent."""
    if result is None:
        return b""
    return orjson.dumps(encode_value(result, "result"))


def error_json(error: Mapping[str, Any], now: float) -> tuple[bytes, bool, str, str]:
    """An ``errors`` entry (``at`` defaulted), whether it has ``attempt``, last_error, kind."""
    entry = dict(error)
    entry.setdefault("at", now)
    has_attempt = "attempt" in entry
    etype, message = entry.get("type") or "", entry.get("message") or ""
    last_error = f"{etype}: {message}" if etype else str(message)
    return orjson.dumps(entry, default=str), has_attempt, last_error, str(entry.get("kind") or "")


_STATES = {state.value: state for state in JobState}


def job_from_hash(fields: Mapping[bytes, bytes], queue: str) -> Job:
    """Rebuild a Job from its hash; ``DecodeError`` if the payload or a field is malformed.

    Same rules as ``core.serialization.job_from_dict`` (version, required fields, types), with
    the mutable hash fields overriding the envelope; typed values are only decoded when the
    JSON contains a ``"$`` key.
    """
    raw = fields.get(b"payload")
    data = _envelope(raw)
    typed = raw is not None and b'"$' in raw
    try:
        check_nesting(raw or b"", data)
        check_int_fields(data)
        return _build(data, fields, queue, typed)
    except DecodeError:
        raise
    except (
        TypeError,
        ValueError,
        AttributeError,
        KeyError,
        RecursionError,
        orjson.JSONDecodeError,
    ) as exc:
        raise DecodeError(f"malformed job field: {exc!r}") from exc


def _envelope(raw: bytes | None) -> dict[str, Any]:
    """Parse and check an envelope: JSON object, version 1, required fields, known state."""
    if raw is None:
        raise DecodeError("the job has no payload")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not valid JSON: {exc}") from exc
    if type(data) is not dict:
        raise DecodeError("envelope must be a JSON object")
    if data.get("v") != ENVELOPE_VERSION:
        raise DecodeError(f"unsupported envelope version {data.get('v')!r}")
    if "id" not in data or "task" not in data or "queue" not in data or "state" not in data:
        missing = [name for name in _REQUIRED if name not in data]
        raise DecodeError(f"envelope is missing fields: {', '.join(missing)}")
    if data["state"] not in _STATES:
        raise DecodeError(f"unknown state {data['state']!r} in the envelope")
    return data


def claimed_job(item: Sequence[Any], queue: str, now: float, expires: float, worker_id: str) -> Job:
    """The Job of one entry of claim.lua's reply (fast path; ``DecodeError`` if malformed).

    ``item`` is ``[id, token, payload, extra]``: ``extra`` is None for a fresh job (first
    attempt, nothing in its hash beyond the envelope), else ``[attempts, run_at, lost, errors,
    history, last_error]`` from its hash. The Job is built by ``Job.fast`` (no ``__init__``):
    this runs once per claimed job.
    """
    raw = item[2]
    data = _envelope(raw)
    # a payload shorter than MAX_DEPTH cannot hold MAX_DEPTH brackets: no count needed
    if len(raw) > MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        check_nesting(raw, data)  # what orjson could not have written: never recurse on it
    keys = len(data)  # a flow group's job (issue 15) has one more key: ``flow``
    if (keys == _PLAIN_LEN or (keys == _PLAIN_LEN + 1 and "flow" in data)) and b'"$' not in raw:
        try:
            return _plain_job(data, item, queue, now, expires, worker_id)
        except KeyError:
            pass  # a key of the plain envelope is missing: another one is there (below)
        except (TypeError, ValueError, AttributeError) as exc:
            raise DecodeError(f"malformed job field: {exc!r}") from exc
    try:
        get = data.get
        args, kwargs, metadata = get("args") or [], get("kwargs") or {}, get("metadata") or {}
        if b'"$' in raw:
            args, kwargs = decode_value(args), decode_value(kwargs)
            metadata = decode_value(metadata)
        attempts, run_at, lost, errors, history, last_error = item[3] or _FRESH
        task, priority, max_attempts = data["task"], get("priority", 0), get("max_attempts", 4)
        timeout, ttl = get("timeout"), get("idempotency_ttl")
        if not lost:  # claim.lua answers the hash's count; an old job keeps it in the envelope
            lost = get("lost", 0)
            lost = lost if type(lost) is int else int_field("lost", lost)
        job = Job.fast(
            {
                "id": item[0].decode(),
                "task": task if type(task) is str else str(task),
                "args": args if type(args) is list else list(args),  # orjson's lists are fresh
                "kwargs": kwargs if type(kwargs) is dict else dict(kwargs),
                "queue": queue,
                # orjson yields an int only within 64 bits; anything else is range-checked
                "priority": priority if type(priority) is int else int_field("priority", priority),
                "state": JobState.ACTIVE,
                "attempts": int(attempts),
                "max_attempts": max_attempts
                if type(max_attempts) is int
                else int_field("max_attempts", max_attempts),
                "timeout": None if timeout is None else float(timeout),
                "run_at": float(run_at or get("run_at") or 0.0),
                "created_at": float(get("created_at") or 0.0),
                "started_at": now,
                "finished_at": None,
                "result": None,
                "last_error": last_error.decode() if last_error else get("last_error"),
                "errors": _lines(errors) if errors else list(get("errors") or ()),
                "history": _lines(history) if history else list(get("history") or ()),
                "idempotency_key": get("idempotency_key"),
                "idempotency_ttl": float(ttl) if ttl else 300.0,
                "metadata": metadata if type(metadata) is dict else dict(metadata),
                "lost": int(lost),
                "worker_id": worker_id or None,
                "lease_expires_at": expires,
                "retry_on": None,
                "dead_on": None,
                "expires_at": None if (exp := get("expires_at")) is None else float(exp),
                "flow": _checked_flow(get("flow")),
            }
        )
        if b'_on"' in raw:  # per-job retry_on / dead_on (rare): checked like job_from_dict
            job.retry_on = exception_names(get("retry_on"), "retry_on")
            job.dead_on = exception_names(get("dead_on"), "dead_on")
        return job
    except (
        TypeError,
        ValueError,
        AttributeError,
        KeyError,
        RecursionError,
        orjson.JSONDecodeError,
    ) as exc:
        raise DecodeError(f"malformed job field: {exc!r}") from exc


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


def _build(data: dict[str, Any], fields: Mapping[bytes, bytes], queue: str, typed: bool) -> Job:
    get, field = data.get, fields.get
    args, kwargs, metadata = get("args") or [], get("kwargs") or {}, get("metadata") or {}
    result: Any = get("result")
    if typed:
        args, kwargs = decode_value(args), decode_value(kwargs)
        metadata, result = decode_value(metadata), decode_value(result)
    if (raw_result := field(b"result")) is not None:
        result = orjson.loads(raw_result)
        if b'"$' in raw_result:
            result = decode_value(result)
    state_raw = field(b"state")
    state = _STATES[state_raw.decode() if state_raw is not None else data["state"]]
    worker = field(b"worker_id")
    errors, history = field(b"errors"), field(b"history")
    lease = field(b"lease_expires_at") if state is JobState.ACTIVE else None
    return Job(
        id=str(data["id"]),
        task=str(data["task"]),
        args=list(args),
        kwargs=dict(kwargs),
        queue=queue,
        priority=int(get("priority", 0)),
        state=state,
        attempts=int(field(b"attempts") or get("attempts", 0)),
        max_attempts=int(get("max_attempts", 4)),
        timeout=_opt(get("timeout")),
        run_at=float(field(b"run_at") or get("run_at") or 0.0),
        created_at=float(get("created_at") or 0.0),
        started_at=_opt(field(b"started_at") or get("started_at")),
        finished_at=_opt(field(b"finished_at") or get("finished_at")),
        result=result,
        last_error=(field(b"last_error") or b"").decode() or get("last_error"),
        errors=_lines(errors) if errors is not None else list(get("errors") or []),
        history=_lines(history) if history is not None else list(get("history") or []),
        idempotency_key=get("idempotency_key"),
        idempotency_ttl=float(get("idempotency_ttl") or 300.0),
        metadata=dict(metadata),
        lost=int(field(b"lost") or get("lost", 0)),
        worker_id=(worker.decode() or None) if worker is not None else get("worker_id"),
        lease_expires_at=_opt(lease),
        retry_on=exception_names(get("retry_on"), "retry_on"),
        dead_on=exception_names(get("dead_on"), "dead_on"),
        expires_at=_opt(field(b"expires_at")),  # the hash field: requeue deletes it
        flow=get("flow"),
    )


def _checked_flow(flow: Any) -> Any:
    """A claimed job's flow record, or ``DecodeError``: not of the shape ``job_flow`` writes."""
    if flow is not None and (problem := flow_problem(flow)) is not None:
        raise DecodeError(problem)
    return flow
