"""Pure transition functions: apply one event of the state table to a Job record.

The memory and SQLite brokers call these inside their atomic sections; the Redis Lua scripts
mirror them line for line. Each function checks the transition table first, so an illegal
event raises ``IllegalTransition`` before anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .job import ErrorKind, Job
from .state import Event, JobState, transition


def initial_state(run_at: float, now: float) -> JobState:
    """``scheduled`` when ``run_at`` is in the future, else ``pending``."""
    return JobState.SCHEDULED if run_at > now else JobState.PENDING


def claim(job: Job, now: float, visibility_timeout: float, worker_id: str) -> None:
    """pending → active: one more attempt, a lease until ``now + visibility_timeout``."""
    job.state = transition(job.state, Event.CLAIM)
    job.attempts += 1
    job.started_at = now
    job.worker_id = worker_id or None
    job.lease_expires_at = now + visibility_timeout


def complete(job: Job, now: float, result: Any, error: Mapping[str, Any] | None = None) -> None:
    """active → completed with ``result``; ``error`` (a dropped result's note) joins ``errors``."""
    job.state = transition(job.state, Event.COMPLETE)
    job.result = result
    if error is not None:
        _append_error(job, now, error)
    job.finished_at = now
    job.lease_expires_at = None


def result_dropped(job: Job) -> bool:
    """True for a job completed WITHOUT its result: it could not be stored, and the worker
    noted why (the last ``errors`` entry, of kind ``result_error``; ``complete`` above)."""
    if job.state is not JobState.COMPLETED or job.result is not None or not job.errors:
        return False
    last = job.errors[-1]
    return isinstance(last, dict) and last.get("kind") == ErrorKind.RESULT_ERROR.value


def fail(job: Job, now: float, error: Mapping[str, Any], retry_at: float | None) -> None:
    """active → retry_scheduled (at ``retry_at``) or dead_letter (``retry_at`` None)."""
    event = Event.BURY if retry_at is None else Event.FAIL_RETRY
    job.state = transition(job.state, event)
    _append_error(job, now, error)
    job.lease_expires_at = None
    if retry_at is None:
        job.finished_at = now
    else:
        job.run_at = retry_at


def bury_undecodable(job: Job, now: float, worker_id: str) -> None:
    """active → dead_letter for a claimed job whose stored envelope could not be decoded
    (kind ``decode_error``; the decoder's message is in ``metadata["decode_error"]``). The SQL
    brokers call it from their claims; Redis builds the same entry from raw hash fields."""
    error = {
        "kind": str(ErrorKind.DECODE_ERROR),
        "type": "DecodeError",
        "traceback": "",
        "message": str(job.metadata.get("decode_error")),
        "worker": worker_id or None,
        "at": now,
    }
    fail(job, now, error, None)


def _append_error(job: Job, now: float, error: Mapping[str, Any]) -> None:
    """Append an ``errors`` entry (attempt and time defaulted) and set ``last_error``."""
    entry = dict(error)
    entry.setdefault("attempt", job.attempts)
    entry.setdefault("at", now)
    job.errors.append(entry)
    etype, message = entry.get("type") or "", entry.get("message") or ""
    job.last_error = f"{etype}: {message}" if etype else str(message)


def release(job: Job, now: float, delay: float, penalize: bool, note: str) -> None:
    """active → pending (or scheduled after ``delay``); no attempt penalty when asked."""
    job.state = transition(job.state, Event.RELEASE_DELAYED if delay > 0 else Event.RELEASE)
    if not penalize:
        job.attempts = max(0, job.attempts - 1)
    job.record_event("released", now, note, job.worker_id)
    job.run_at = now + delay if delay > 0 else now
    job.lease_expires_at = None
    job.worker_id = None


def expire(job: Job, now: float, max_lost: int) -> None:
    """Lease ran out: active → pending, or dead_letter on the ``max_lost``-th loss."""
    job.lost += 1
    poison = job.lost >= max_lost
    job.state = transition(job.state, Event.EXPIRE_POISON if poison else Event.EXPIRE)
    message = f"lease expired (lost delivery {job.lost} of {max_lost})"
    job.record_error(kind=ErrorKind.WORKER_LOST, message=message, at=now, worker_id=job.worker_id)
    job.lease_expires_at = None
    job.worker_id = None
    job.run_at = now
    if poison:
        job.finished_at = now


def cancel(job: Job, now: float) -> None:
    """scheduled / pending / retry_scheduled → cancelled."""
    job.state = transition(job.state, Event.CANCEL)
    job.finished_at = now
    job.record_event("cancelled", now)


def cancel_running(job: Job, now: float, note: str) -> None:
    """active → cancelled: the lease holder stopped the job an operator cancelled (issue 16)."""
    job.state = transition(job.state, Event.CANCEL_RUNNING)
    job.finished_at = now
    job.record_event("cancelled", now, note, job.worker_id)
    job.lease_expires_at = None


def requeue(job: Job, now: float) -> None:
    """dead_letter / cancelled → pending with fresh attempts; history and errors kept."""
    job.state = transition(job.state, Event.REQUEUE)
    job.record_event("requeued", now, f"after {job.attempts} attempts")
    job.attempts = 0
    job.lost = 0
    job.run_at = now
    job.finished_at = None
    job.result = None
    job.expires_at = None  # an operator's requeue of an expired job means "run it now"


def lapse(job: Job, now: float) -> None:
    """pending → expired: a claim found it past its ``expires_at``; it never runs."""
    job.state = transition(job.state, Event.LAPSE)
    job.finished_at = now
    job.lease_expires_at = None
    job.record_event("expired", now, "not started before its expires_at")


def is_lapsed(job: Job, now: float) -> bool:
    """True when ``job`` carries an ``expires_at`` that ``now`` has reached."""
    expires_at = job.__dict__.get("expires_at")  # a Job built without the field reads None
    return expires_at is not None and expires_at <= now


def promote(job: Job) -> None:
    """scheduled / retry_scheduled → pending (its run_at has come)."""
    job.state = transition(job.state, Event.PROMOTE)


def release_parents(job: Job, now: float, inputs: list[Any], delay: float = 0.0) -> None:
    """waiting → pending: the node's last parent finished; ``inputs`` (its parents' results, as
    the workflow passes them) go before its own arguments. A node with its own ``delay`` (or a
    ``run_at`` still ahead, kept in ``job.run_at`` since enqueue) goes waiting → scheduled for
    ``max(now + delay, run_at)`` instead."""
    due = max(now + delay, job.run_at)
    later = due > now
    job.state = transition(
        job.state, Event.RELEASE_PARENTS_LATER if later else Event.RELEASE_PARENTS
    )
    if inputs:
        job.args = [*inputs, *job.args]
    job.run_at = due if later else now


def upstream_failed(job: Job, now: float, parent_id: str, detail: str) -> None:
    """waiting → cancelled: parent ``parent_id`` failed and the edge's policy is "fail the rest"."""
    job.state = transition(job.state, Event.UPSTREAM_FAILED)
    message = f"parent {parent_id} {detail}"
    job.record_error(kind=ErrorKind.UPSTREAM_FAILED, message=message, at=now)
    job.errors[-1]["parent"] = parent_id
    job.finished_at = now


def run_now(job: Job, now: float) -> None:
    """scheduled / retry_scheduled → pending at once (an operator's "run now"); attempts,
    errors and history kept, the early start noted in the history."""
    job.state = transition(job.state, Event.PROMOTE)
    job.record_event("run_now", now, "made due now by an operator")
    job.run_at = now


def debounce(job: Job, newer: Job, now: float) -> bool:
    """``debounce`` (issue 15): a job that still waits takes ``newer``'s arguments and metadata,
    a scheduled one also its ``run_at`` (its delay restarts). False (nothing changed) when it
    no longer waits."""
    if job.state not in (JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED):
        return False
    job.args, job.kwargs = list(newer.args), dict(newer.kwargs)
    job.metadata = dict(newer.metadata)
    job.record_event("debounced", now, "arguments replaced by a newer enqueue")
    if job.state is JobState.SCHEDULED:
        job.run_at = newer.run_at
    return True
