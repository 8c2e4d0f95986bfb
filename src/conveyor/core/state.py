"""Job states and THE transition table: every backend obeys it, the tests enumerate it.

::

    (enqueue) ──> scheduled ──promote──> pending ──claim──> active ──complete──> completed
                    │   ▲                 ▲  ▲               │ │ │
                    │   └──release(delay)─┼──┼───────────────┘ │ └─fail_retry──> retry_scheduled
                    │                     │  └─release/expire──┘                   │
                    │                     └─────────────promote────────────────────┘
                    └─cancel──> cancelled     active ──bury / expire_poison──> dead_letter
    pending / scheduled / retry_scheduled ──cancel──> cancelled
    dead_letter / cancelled ──requeue──> pending
    pending ──lapse (expires_at passed before it started)──> expired ──requeue──> pending
    active ──cancel_running (lease holder, fenced)──> cancelled
    (enqueue a workflow node) ──> waiting ──release_parents──> pending
                                    │ ├──release_parents_later (own delay)──> scheduled
                                    │ └──upstream_failed / cancel──> cancelled

A workflow node waits (``waiting``) until its last parent finishes: the transition that finishes
that parent releases it in the same atomic step (docs/workflows.md), or ends it ``cancelled`` with
an ``upstream_failed`` error naming the parent that failed.

Terminal states (``completed``, ``dead_letter``, ``cancelled``, ``expired``) never run again
unless an operator requeues the job.
"""

from __future__ import annotations

from enum import StrEnum

from ..errors import IllegalTransition


class JobState(StrEnum):
    """Where a job is in its life; values are the lowercase strings stored on the wire."""

    SCHEDULED = "scheduled"
    PENDING = "pending"
    ACTIVE = "active"
    RETRY_SCHEDULED = "retry_scheduled"
    COMPLETED = "completed"
    DEAD_LETTER = "dead_letter"
    CANCELLED = "cancelled"
    WAITING = "waiting"  # a workflow node whose parents have not all finished
    EXPIRED = "expired"  # not started before its expires_at (issue 15): never ran


class Event(StrEnum):
    """Things that happen to a job; each allowed (state, event) pair has one target state."""

    PROMOTE = "promote"  # run_at reached
    CLAIM = "claim"  # a worker leased it
    COMPLETE = "complete"  # handler returned (a result that cannot be stored: completed without it)
    FAIL_RETRY = "fail_retry"  # handler failed, policy says retry later
    BURY = "bury"  # handler failed permanently / out of attempts / undecodable
    RELEASE = "release"  # worker gave it back (nack, graceful shutdown), ready now
    RELEASE_DELAYED = "release_delayed"  # worker gave it back with a delay
    EXPIRE = "expire"  # lease ran out (worker lost); redelivered
    EXPIRE_POISON = "expire_poison"  # lease ran out for the max_lost-th time
    CANCEL = "cancel"  # operator cancelled before it ran
    REQUEUE = "requeue"  # operator revived a terminal job
    # issue 16: an operator cancelled a RUNNING job; its worker stopped it and records the
    # cancellation with its lease token (fenced: a stale holder changes nothing)
    CANCEL_RUNNING = "cancel_running"
    RELEASE_PARENTS = "release_parents"  # a workflow node's last parent finished: it may run
    # ... and the node has its own delay (or a run_at still ahead): it runs at release + delay
    RELEASE_PARENTS_LATER = "release_parents_later"
    UPSTREAM_FAILED = "upstream_failed"  # a parent failed under the "fail the rest" policy
    LAPSE = "lapse"  # a claim found it past its expires_at: it will never run


TERMINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED}
)

_S = JobState
_E = Event

TRANSITIONS: dict[tuple[JobState, Event], JobState] = {
    (_S.SCHEDULED, _E.PROMOTE): _S.PENDING,
    (_S.RETRY_SCHEDULED, _E.PROMOTE): _S.PENDING,
    (_S.PENDING, _E.CLAIM): _S.ACTIVE,
    (_S.ACTIVE, _E.COMPLETE): _S.COMPLETED,
    (_S.ACTIVE, _E.FAIL_RETRY): _S.RETRY_SCHEDULED,
    (_S.ACTIVE, _E.BURY): _S.DEAD_LETTER,
    (_S.ACTIVE, _E.RELEASE): _S.PENDING,
    (_S.ACTIVE, _E.RELEASE_DELAYED): _S.SCHEDULED,
    (_S.ACTIVE, _E.EXPIRE): _S.PENDING,
    (_S.ACTIVE, _E.EXPIRE_POISON): _S.DEAD_LETTER,
    (_S.SCHEDULED, _E.CANCEL): _S.CANCELLED,
    (_S.PENDING, _E.CANCEL): _S.CANCELLED,
    (_S.RETRY_SCHEDULED, _E.CANCEL): _S.CANCELLED,
    (_S.DEAD_LETTER, _E.REQUEUE): _S.PENDING,
    (_S.CANCELLED, _E.REQUEUE): _S.PENDING,
    # cancelling a running job (issue 16; worker/cancel.py): never retried
    (_S.ACTIVE, _E.CANCEL_RUNNING): _S.CANCELLED,
    (_S.WAITING, _E.RELEASE_PARENTS): _S.PENDING,
    (_S.WAITING, _E.RELEASE_PARENTS_LATER): _S.SCHEDULED,
    (_S.WAITING, _E.UPSTREAM_FAILED): _S.CANCELLED,
    (_S.WAITING, _E.CANCEL): _S.CANCELLED,
    # expiry (issue 15): kept apart from the entries above
    (_S.PENDING, _E.LAPSE): _S.EXPIRED,
    (_S.EXPIRED, _E.REQUEUE): _S.PENDING,
}


def transition(state: JobState | str, event: Event | str) -> JobState:
    """Return the state after ``event`` in ``state``; raise ``IllegalTransition`` if not allowed."""
    try:
        key = (JobState(state), Event(event))
    except ValueError as exc:
        raise IllegalTransition(str(state), str(event)) from exc
    target = TRANSITIONS.get(key)
    if target is None:
        raise IllegalTransition(key[0].value, key[1].value)
    return target


def allowed(state: JobState | str, event: Event | str) -> bool:
    """True when ``event`` may happen in ``state``."""
    try:
        return (JobState(state), Event(event)) in TRANSITIONS
    except ValueError:
        return False


def is_terminal(state: JobState | str) -> bool:
    """True for completed, dead_letter, cancelled and expired."""
    return JobState(state) in TERMINAL_STATES
