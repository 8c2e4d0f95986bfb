"""Decoding a ``jobs`` row of the PostgreSQL backend: the envelope plus the claim overlay.

The claim is ONE statement per batch (``postgres/claim.py``): it writes the row's columns
(state ``active``, lease deadline, fencing token, ``claims``, ``started_at``, ``worker``) and
leaves the stored envelope as it was, so no per-job write follows. The envelope therefore lags
by the claim while ``claims > 0``: ``pg_rec`` applies the overlay (state, attempts,
started_at, worker, lease deadline) to the decoded job, and the next full write of the row
(``PostgresBroker._save``, the set-based completion) stores the whole envelope and resets
``claims`` to 0. Every reader decodes rows through ``pg_rec`` with ``COLS``.

``claimed_job`` is the claim's fast path: a job enqueued without options (the 11-key envelope
``envelope_dict`` writes, no typed value; plus its ``flow`` record for a grouped job) gets
its Job from a template copy, as on Redis
(``broker/redis/claimjob.py``), instead of ``job_from_dict``; anything else goes through
``pg_rec``. ``completed_envelope`` is the completion's fast path: it patches the stored envelope
as a dict (the overlay and the fields ``lifecycle.complete`` sets) instead of building a ``Job``
and encoding it again; anything unexpected sends the row to the full decode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import orjson

from ...core.flow import flow_problem
from ...core.job import Job
from ...core.serialization import ENVELOPE_VERSION, encode_value
from ...core.state import JobState
from ...core.stored import MAX_DEPTH, int_field
from ..sqlite_rows import Rec

#: The row layout ``pg_rec`` reads: ``Rec``'s eleven columns, then the claim overlay.
COLS = (
    "rid, id, queue, task, state, priority, run_at, created_at, finished_at, last_error,"
    " payload, claims, started_at, worker, lease_at"
)


def pg_rec(row: Sequence[Any]) -> Rec:
    """Decode one ``COLS`` row; an active row claimed since its envelope was written gets
    the claim's fields (the envelope still says ``pending`` and the attempt before)."""
    claims = row[11]
    if not claims or row[4] != "active":
        return Rec(tuple(row[:11]), True)
    rec = Rec((*row[:4], "pending", *row[5:11]), True)
    job = rec.job
    job.state = JobState.ACTIVE
    job.attempts += claims
    job.started_at = row[12]
    job.worker_id = row[13] or None
    job.lease_expires_at = row[14]
    rec.state = "active"
    return rec


#: how many keys the envelope of a job enqueued without options has (``envelope_dict``)
PLAIN_LEN = 11
#: every field of a claimed plain job; ``claimed_job`` copies it and sets the per-job ones
_TEMPLATE: dict[str, Any] = {
    **dict.fromkeys(f.name for f in dataclasses.fields(Job)),
    "state": JobState.ACTIVE,
    "attempts": 0,
    "idempotency_ttl": 300.0,
    "lost": 0,
}


def claimed_job(row: Sequence[Any]) -> Job | None:
    """The Job of a just-claimed ``COLS`` row whose envelope is plain (``PLAIN_LEN`` keys, no
    typed value, pending, matching the row), built from ``_TEMPLATE``; None for any other row
    (the caller decodes it with ``pg_rec``, which also handles an undecodable one)."""
    raw = row[10]
    if b'"$' in raw or (len(raw) > MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH):
        return None  # a typed value, or deep enough to need the nesting check: the full path
    try:
        data = orjson.loads(raw)
        # issue 15: a grouped job's envelope also has its flow record (copied as it is)
        flow = data.get("flow") if type(data) is dict else None
        if (
            type(data) is not dict
            or len(data) != PLAIN_LEN + (flow is not None)
            or (flow is not None and flow_problem(flow) is not None)
            or data["v"] != ENVELOPE_VERSION
            or data["state"] != "pending"
            or data["id"] != row[1]
            or data["queue"] != row[2]
        ):
            return None
        task, args, kwargs = data["task"], data["args"], data["kwargs"]
        priority, max_attempts = data["priority"], data["max_attempts"]
        run_at, created_at = data["run_at"], data["created_at"]
        values = _TEMPLATE.copy()
        values["id"], values["queue"] = row[1], row[2]
        values["task"] = task if type(task) is str else str(task)
        values["args"] = args if type(args) is list else list(args)  # orjson's are fresh
        values["kwargs"] = kwargs if type(kwargs) is dict else dict(kwargs)
        # orjson yields an int only within 64 bits; anything else is range-checked
        values["priority"] = priority if type(priority) is int else int_field("priority", priority)
        values["max_attempts"] = (
            max_attempts if type(max_attempts) is int else int_field("max_attempts", max_attempts)
        )
        values["run_at"] = float(run_at or 0.0)
        values["created_at"] = float(created_at or 0.0)
        values["attempts"] = row[11]
        values["started_at"], values["worker_id"] = row[12], row[13] or None
        values["lease_expires_at"] = row[14]
        values["errors"], values["history"], values["metadata"] = [], [], {}
        values["flow"] = flow
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError):
        return None  # not the plain envelope: the full path decides (and reports)
    return Job.fast(values)


def completed_envelope(row: Sequence[Any], now: float, result: Any) -> tuple[bytes, int] | None:
    """The envelope of the active ``COLS`` row completed at ``now`` with ``result``, and its
    attempt number; None when the stored envelope is not the plain one expected (the caller
    then decodes it fully). Raises what encoding ``result`` raises (``ValidationError``)."""
    try:
        data = orjson.loads(row[10])
    except orjson.JSONDecodeError:
        return None
    claims = row[11]
    if (
        not isinstance(data, dict)
        or data.get("v") != ENVELOPE_VERSION
        or data.get("id") != row[1]
        or data.get("state") != ("pending" if claims else "active")
        or type(attempts := data.get("attempts", 0)) is not int
    ):
        return None
    if claims:
        data["attempts"] = attempts = attempts + claims
        data["started_at"], data["worker_id"] = row[12], row[13] or None
    data["state"], data["result"] = "completed", encode_value(result, "result")
    data["finished_at"], data["lease_expires_at"] = now, None
    return orjson.dumps(data), attempts
