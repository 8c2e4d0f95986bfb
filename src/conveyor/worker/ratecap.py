"""How many times in a row a job may raise ``RateLimited`` before it counts as a failure.

``RateLimited`` gives the job back without spending an attempt, ``retry_after`` seconds later
(0 is allowed: a partner's ``Retry-After: 0``). A handler that raises it on every run would
be rescheduled for ever. Sidekiq Enterprise's limiter reschedules an ``OverLimit`` job at
most 20 times (``job["overrated"]``), then lets the error take the ordinary retry path; so
does the worker here: the ``max_rate_limited``-th ``RateLimited`` in a row within one attempt
(worker option, default ``DEFAULT_MAX_RATE_LIMITED``; None: no cap) is recorded as an ordinary
failure, kind ``error``, type ``RateLimited``: it spends the attempt and is retried under the
task's backoff, or dead-lettered when none is left.

The run is counted from the job's history (no new stored field): every give-back writes a
``released`` entry whose note starts with "rate limited" and whose ``attempt`` is the attempt
given back, so the entries at the end of the history with the current attempt are the run.
The history keeps ``MAX_HISTORY`` (50) entries, hence the cap's upper bound.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ..core.job import MAX_HISTORY, ErrorKind, Job
from ..core.retry import Decision, previous_delay
from ..errors import ValidationError
from .execute import Outcome

if TYPE_CHECKING:
    from .running import Running

DEFAULT_MAX_RATE_LIMITED = 20  # Sidekiq Enterprise's limiter: 20 reschedules
LIMIT = MAX_HISTORY - 1  # the run must fit in the bounded history
_NOTE = "rate limited"


def checked(value: object) -> int | None:
    """The ``max_rate_limited`` option: None (no cap) or an integer 1..49."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIMIT:
        raise ValidationError(
            "max_rate_limited", f"must be an integer 1..{LIMIT} or None, got {value!r:.40}"
        )
    return value


def in_a_row(job: Job) -> int:
    """``RateLimited`` give-backs of the job's current attempt (``job.attempts`` as claimed:
    each give-back recorded the attempt it returned, one less)."""
    given_back = job.attempts - 1
    count = 0
    for entry in reversed(job.history):
        if not isinstance(entry, dict) or entry.get("event") != "released":
            break
        note = entry.get("note")
        if not isinstance(note, str) or not note.startswith(_NOTE):
            break
        if entry.get("attempt") != given_back:
            break
        count += 1
    return count


def capped(
    run: Running, outcome: Outcome, now: float, cap: int | None, rng: random.Random
) -> Outcome | None:
    """The failure that replaces a ``RateLimited`` give-back (``outcome``) once ``cap`` is
    reached; None while the job may still be given back."""
    decision = outcome.decision
    assert decision is not None
    job = run.job
    count = in_a_row(job) + 1
    if cap is None or count < cap:
        return None
    policy = run.task.policy if run.task is not None else None
    max_attempts = job.max_attempts or (policy.max_attempts if policy is not None else 1)
    retry_at = None
    if policy is not None and job.attempts < max_attempts:
        retry_at = now + policy.backoff.delay(job.attempts, rng, previous_delay(job))
    message = f"rate limited {count} times in a row (max_rate_limited={cap}): {decision.message}"
    failure = Decision(ErrorKind.ERROR, retry_at, "RateLimited", message, decision.traceback)
    return Outcome(False, decision=failure, error=outcome.error)  # after_process sees it
