"""Undecodable Redis job hashes: what is kept of them, their stub envelope, their error entry.

Split out of ``broker/redis/codec.py`` (which re-exports these names). ``claim`` never returns
a job it cannot decode: it dead-letters it with a ``decode_error`` entry, replaces its payload
with a minimal valid envelope (the original bytes go to ``raw``), and reads keep whatever parses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import orjson

from ...core.job import Job
from ...core.serialization import ENVELOPE_VERSION
from ...core.state import JobState

UNDECODABLE_TASK = "<undecodable>"
_STATES = {state.value: state for state in JobState}


def salvage(fields: Mapping[bytes, bytes], queue: str, job_id: str, problem: str) -> Job:
    """Best effort for a job hash that does not decode: every field that parses is kept."""
    job = Job(id=job_id, task=UNDECODABLE_TASK, queue=queue, last_error=f"undecodable: {problem}")
    try:
        data = orjson.loads(fields.get(b"payload") or b"null")
        if isinstance(data, dict) and isinstance(data.get("task"), str):
            job.task = data["task"]
    except orjson.JSONDecodeError:
        pass
    state = fields.get(b"state", b"").decode("utf-8", "replace")
    job.state = _STATES.get(state, JobState.DEAD_LETTER if state else JobState.PENDING)
    for name, convert in (
        ("attempts", int),
        ("lost", int),
        ("run_at", float),
        ("created_at", float),
        ("finished_at", float),
    ):
        with contextlib.suppress(KeyError, ValueError):
            setattr(job, name, convert(fields[name.encode()]))
    for name in ("errors", "history"):
        entries = []
        for line in fields.get(name.encode(), b"").split(b"\n"):
            try:
                entries.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
        setattr(job, name, entries)
    if last := fields.get(b"last_error"):
        job.last_error = last.decode("utf-8", "replace")
    return job


def stub_payload(job_id: str, queue: str, fields: Mapping[bytes, bytes]) -> bytes:
    """A minimal valid envelope replacing an undecodable one (the original goes to ``raw``)."""
    task = fields.get(b"task", b"").decode("utf-8", "replace") or UNDECODABLE_TASK
    return orjson.dumps(
        {
            "v": ENVELOPE_VERSION,
            "id": job_id,
            "task": task,
            "queue": queue,
            "state": "dead_letter",
            "args": [],
            "kwargs": {},
        }
    )


def decode_error_entry(
    message: str, fields: Mapping[bytes, bytes], worker: str, now: float
) -> dict[str, Any]:
    """The ``errors`` entry recorded when a claimed job cannot be decoded."""
    try:
        attempt = int(fields.get(b"attempts", b"0"))
    except ValueError:
        attempt = 0
    return {
        "attempt": attempt,
        "kind": "decode_error",
        "type": "DecodeError",
        "message": message[:2000],
        "traceback": "",
        "worker": worker or None,
        "at": now,
    }
