"""The Job of a claimed job whose envelope is plain: the claim's fast path (``codec.claimed_job``).

A job enqueued without options has an envelope of exactly the 11 keys ``envelope_dict`` always
writes (``v``, ``id``, ``task``, ``args``, ``kwargs``, ``queue``, ``priority``, ``state``,
``max_attempts``, ``run_at``, ``created_at``). Its Job is a copy of ``_TEMPLATE`` (every field
at the value such a job has) with the per-job fields set: copying a dict is several times
cheaper than building a 28-key one, and no optional field is looked up. This runs once per
claimed job of a drain. A job of a flow group (issue 15: ``fair_by``, a limit) has one more
key, ``flow``, and takes this path too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import orjson

from ...core.flow import flow_problem
from ...core.job import Job
from ...core.state import JobState
from ...core.stored import int_field
from ...errors import DecodeError

#: how many keys the envelope of a job enqueued without options has (``envelope_dict``)
PLAIN_LEN = 11
#: every field of a claimed plain job; ``plain_job`` copies it and sets the per-job ones
_TEMPLATE: dict[str, Any] = {
    **dict.fromkeys(f.name for f in dataclasses.fields(Job)),
    "state": JobState.ACTIVE,
    "idempotency_ttl": 300.0,
    "lost": 0,
}


def lines(raw: bytes) -> list[Any]:
    """The entries of a JSON Lines hash field (``errors``, ``history``)."""
    return [orjson.loads(line) for line in raw.split(b"\n") if line]


def plain_job(
    data: dict[str, Any],
    item: Sequence[Any],
    queue: str,
    now: float,
    expires: float,
    worker_id: str,
) -> Job:
    """The Job of claim.lua's reply entry ``item`` (``[id, token, payload, extra]``: see
    ``codec.claimed_job``) whose envelope ``data`` has ``PLAIN_LEN`` keys and no typed value;
    ``KeyError`` if one of the plain keys is missing (then another key is there: not a plain
    envelope)."""
    task, args, kwargs = data["task"], data["args"], data["kwargs"]
    priority, max_attempts = data["priority"], data["max_attempts"]
    created_at, first_run_at = data["created_at"], data["run_at"]
    extra = item[3]
    values = _TEMPLATE.copy()
    values["id"] = item[0].decode()
    values["task"] = task if type(task) is str else str(task)
    values["args"] = args if type(args) is list else list(args)  # orjson's lists are fresh
    values["kwargs"] = kwargs if type(kwargs) is dict else dict(kwargs)
    values["queue"] = queue
    # orjson yields an int only within 64 bits; anything else is range-checked
    if type(priority) is not int:
        priority = int_field("priority", priority)
    values["priority"] = priority
    if type(max_attempts) is not int:
        max_attempts = int_field("max_attempts", max_attempts)
    values["max_attempts"] = max_attempts
    values["created_at"] = float(created_at or 0.0)
    values["started_at"] = now
    values["metadata"] = {}
    values["worker_id"] = worker_id or None
    values["lease_expires_at"] = expires
    if extra is None:  # a fresh job (issue 18): first attempt, nothing in its hash to add
        values["attempts"] = 1
        values["run_at"] = float(first_run_at or 0.0)
        values["errors"] = []
        values["history"] = []
    else:
        attempts, run_at, lost, errors, history, last_error = extra
        values["attempts"] = int(attempts)
        values["run_at"] = float(run_at or first_run_at or 0.0)
        values["errors"] = lines(errors) if errors else []
        values["history"] = lines(history) if history else []
        if last_error:
            values["last_error"] = last_error.decode()
        if lost:
            values["lost"] = int(lost)
    if (flow := data.get("flow")) is not None:  # a flow group's job (issue 15): its one extra key
        if (problem := flow_problem(flow)) is not None:
            raise DecodeError(problem)  # dead-lettered by the claim (decode_error)
        values["flow"] = flow
    return Job.fast(values)
