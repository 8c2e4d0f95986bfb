"""``PlainEnvelopes``: the envelope of a job enqueued without options, from a byte template.

This is the producer's hot path (``Conveyor.enqueue`` of plain calls, ``producer.py``); it must
write exactly the bytes ``core.serialization.encode_envelope`` writes for the same job (see
tests/core/test_producer_fast_paths.py). It lives beside the producer, not in ``core/``: it is a
speed-up of one caller, not part of the job model.
"""

from __future__ import annotations

from typing import Any

import orjson

from .core.cache import BoundedCache
from .core.job import Job
from .core.serialization import (
    MAX_PAYLOAD_BYTES,
    encode_args,
    encode_kwargs,
    envelope_dict,
    unencodable,
)
from .errors import PayloadTooLarge

_MARK_ID, _MARK_ARGS, _MARK_KWARGS, _MARK_RUN, _MARK_CREATED = (
    "@@id@@",
    "@@args@@",
    "@@kwargs@@",
    "@@run_at@@",
    "@@created_at@@",
)


class PlainEnvelopes:
    """``encode_envelope`` for fresh jobs enqueued without options, from a byte template.

    Such jobs differ only in id, args, kwargs and the enqueue time; everything else (task,
    queue, priority, max_attempts, timeout, idempotency_ttl) comes from the task. The template is
    ``encode_envelope`` of a job with markers in those places, cut at the markers (task and queue
    names cannot contain ``@``), so the result is byte for byte what ``encode_envelope`` writes
    for the same job, at a fraction of the cost. Templates are cached per set of task values.
    """

    _MAX = 1000

    def __init__(self, limit: int = MAX_PAYLOAD_BYTES) -> None:
        self.limit = limit
        self._parts: BoundedCache[tuple[Any, ...], tuple[bytes, ...]] = BoundedCache(self._MAX)
        self._last_at: tuple[float, bytes] = (float("nan"), b"")

    def _template(self, job: Job, key: tuple[Any, ...]) -> tuple[bytes, ...]:
        parts = self._parts.get(key)
        if parts is None:
            f = job.__dict__
            sample = Job(
                id=_MARK_ID,
                task=f["task"],
                queue=f["queue"],
                priority=f["priority"],
                max_attempts=f["max_attempts"],
                timeout=f["timeout"],
                idempotency_ttl=f["idempotency_ttl"],
            )
            data = envelope_dict(sample)
            data.update(
                args=_MARK_ARGS, kwargs=_MARK_KWARGS, run_at=_MARK_RUN, created_at=_MARK_CREATED
            )
            raw = orjson.dumps(data)
            for mark in (_MARK_ID, _MARK_ARGS, _MARK_KWARGS, _MARK_RUN, _MARK_CREATED):
                raw = raw.replace(f'"{mark}"'.encode(), b"\0")
            parts = tuple(raw.split(b"\0"))
            if len(parts) != 6:  # pragma: no cover - a marker collided with a name
                raise ValueError("envelope template: unexpected marker count")
            self._parts.put(key, parts)
        return parts

    def encode(self, job: Job, key: tuple[Any, ...] | None = None) -> bytes:
        """The envelope of ``job`` (a fresh pending job: run_at == created_at, no options).

        ``key``: the job's (task, queue, priority, max_attempts, timeout, idempotency_ttl) if
        the caller has it at hand (it names the template).
        """
        f = job.__dict__
        if key is None:
            key = (
                f["task"],
                f["queue"],
                f["priority"],
                f["max_attempts"],
                f["timeout"],
                f["idempotency_ttl"],
            )
        head, p_args, p_kwargs, p_run, p_created, tail = self._template(job, key)
        run_at = f["run_at"]
        last = self._last_at  # one (time, bytes) pair: jobs of a batch share their time
        if last[0] != run_at:
            last = self._last_at = (run_at, orjson.dumps(run_at))
        at = last[1]
        try:
            data = b"".join(
                (
                    head,
                    orjson.dumps(f["id"]),
                    p_args,
                    orjson.dumps(encode_args(f["args"])),
                    p_kwargs,
                    orjson.dumps(encode_kwargs(f["kwargs"])),
                    p_run,
                    at,
                    p_created,
                    at,
                    tail,
                )
            )
        except (TypeError, RecursionError) as exc:
            raise unencodable(job) from exc
        if len(data) > self.limit:
            raise PayloadTooLarge(len(data), self.limit)
        return data
