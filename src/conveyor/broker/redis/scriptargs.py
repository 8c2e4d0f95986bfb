"""Argument builders of the job scripts whose ARGV is more than a few values.

The scalar options go into one JSON object (``codes.options``, ``ARGV[1]``); per-group
headers and per-job records follow positionally (see each script's header and
docs/wire-format.md). Kept out of ``broker.py`` so the transitions read on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...config import Retention
from ...core.job import Job
from ...errors import DuplicateJob, ValidationError
from . import codec
from .codec import fmt_time
from .codes import options

IDEMPOTENCY_GRACE = 60.0  # real-time slack on top of a key's logical TTL before Redis drops it
REAP_BATCH = 1000
PROMOTE_BATCH = 1000


def group_batch(jobs: Sequence[Job], cluster: bool) -> dict[str, list[int]]:
    """Indexes of a batch's jobs by queue, in first-seen order; refuses repeated ids and, in
    Redis Cluster, a batch over several queues (one script call must stay in one slot)."""
    groups: dict[str, list[int]] = {}
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.id in seen:
            raise DuplicateJob(job.id)
        seen.add(job.id)
        idxs = groups.get(job.queue)
        if idxs is None:
            groups[job.queue] = [i]
        else:
            idxs.append(i)
    if len(groups) > 1 and cluster:
        raise ValidationError(
            "jobs",
            "in Redis Cluster one enqueue_many batch must target a single queue"
            f" (atomicity is per queue); got {sorted(groups)}",
        )
    return groups


def enqueue_group(
    queue: str, jobs: Sequence[Job], payloads: Sequence[bytes] | None, now: float
) -> list[Any]:
    """One group of enqueue.lua's ARGV: queue, n, the group defaults, then the job records.

    A job that matches the defaults (those of the group's first job) and has no idempotency key
    is sent as a short record (id, payload, ""), the others in full (see enqueue.lua).
    """
    first = jobs[0]
    state, prio, run_at, created, task = (
        first.state,
        first.priority,
        first.run_at,
        first.created_at,
        first.task,
    )
    at = fmt_time(run_at)
    created_at = at if created == run_at else fmt_time(created)
    args: list[Any] = [queue, len(jobs), str(state), prio, at, created_at, task]
    envelope = codec.envelope
    for i, job in enumerate(jobs):
        payload = envelope(job) if payloads is None else payloads[i]
        if (
            not job.idempotency_key
            and job.expires_at is None
            and job.flow is None
            and job.state == state
            and job.priority == prio
            and job.run_at == run_at
            and job.created_at == created
            and job.task == task
        ):
            args += (job.id, payload, "")
        else:
            args += (job.id, payload, "f", *codec.enqueue_fields(job, now, IDEMPOTENCY_GRACE))
    return args


def enqueue_options(now: str, events_max: str, fresh: bool) -> bytes:
    """enqueue.lua's options object (enqueue_one.lua takes them as plain ARGV); ``fresh``:
    fresh ready members on (``<p>:format``, fmtgate.py)."""
    if fresh:
        return options(now=now, events_max=events_max, fresh=1)
    return options(now=now, events_max=events_max)


def enqueue_one(
    job: Job, payload: bytes | None, now: float, events_max: str, fresh: bool
) -> list[Any] | None:
    """enqueue_one.lua's ARGV for ``job``, or None when that script does not take it (an
    idempotency key, an expiry or a flow group: enqueue.lua's full record)."""
    if job.idempotency_key or job.expires_at is not None or job.flow is not None:
        return None
    run_at = job.run_at
    at = fmt_time(run_at)
    created = at if job.created_at == run_at else fmt_time(job.created_at)
    args: list[Any] = [
        at if now == run_at else fmt_time(now),  # a job for now: one float formatted, not two
        job.id,
        codec.envelope(job) if payload is None else payload,
        str(job.state),
        job.priority,
        at,
        created,
        job.task,
        events_max,
    ]
    if fresh:
        args.append("1")
    return args


def reap_options(queue: str, now: float, max_lost: int, ret: Retention) -> bytes:
    """reap.lua's options object (see its header)."""
    return options(
        queue=queue,
        now=fmt_time(now),
        max_lost=max_lost,
        limit=REAP_BATCH,
        events_max=str(ret.events_max),
        dead_max=ret.dead_letter_max,
        completed_cutoff=fmt_time(now - ret.completed_ttl),
        cancelled_cutoff=fmt_time(now - ret.cancelled_ttl),
    )


def claim_options(
    queue: str, now: str, deadline: str, limit: int, worker: str, max_lost: int, ret: Retention
) -> bytes:
    """claim.lua's options object (``now`` and ``deadline`` already formatted)."""
    return options(
        queue=queue,
        now=now,
        deadline=deadline,
        limit=limit,
        worker=worker,
        events_max=str(ret.events_max),
        promote_max=PROMOTE_BATCH,
        dead_max=ret.dead_letter_max,
        max_lost=max_lost,
    )


def complete_options(queue: str, now: str, ret: Retention) -> bytes:
    """complete.lua's options object (``now`` already formatted)."""
    return options(
        queue=queue, now=now, completed_max=ret.completed_max, events_max=str(ret.events_max)
    )


def fail_options(
    queue: str, now: float, retry_at: float | None, kind: str, has_attempt: bool, ret: Retention
) -> bytes:
    """fail.lua's options object; ``retry_at`` None dead-letters."""
    return options(
        queue=queue,
        now=fmt_time(now),
        retry_at="" if retry_at is None else fmt_time(retry_at),
        kind=kind,
        dead_max=ret.dead_letter_max,
        events_max=str(ret.events_max),
        has_attempt="1" if has_attempt else "0",
    )


def release_options(
    queue: str, now: float, delay: float, penalize: bool, note: str, ret: Retention
) -> bytes:
    """release.lua's options object; a positive ``delay`` schedules the job."""
    return options(
        queue=queue,
        now=fmt_time(now),
        run_at=fmt_time(now + delay) if delay > 0 else "",
        penalize="1" if penalize else "0",
        note=note,
        events_max=str(ret.events_max),
    )
