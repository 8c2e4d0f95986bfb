"""A job that raises ``RateLimited`` again and again stops being rescheduled for free.

``RateLimited(retry_after=0)`` (allowed: a partner's ``Retry-After: 0``) gave the job back at
once without spending an attempt, for ever: a handler that always raises it kept a worker
slot and the broker busy without end. As Sidekiq Enterprise's limiter reschedules an
``OverLimit`` job at most 20 times and then lets the error go to the ordinary retry path, the
``max_rate_limited``-th ``RateLimited`` in a row (worker option, default 20; None: no cap) is
recorded as an ordinary failure (kind ``error``, type ``RateLimited``): it spends an attempt
and is retried under the task's backoff, or dead-lettered once none is left.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Backoff, Conveyor, FakeClock, JobState, ValidationError
from conveyor.errors import RateLimited


def _spinner(app: Conveyor, retry_after: float = 0) -> Any:
    @app.task(max_attempts=2, backoff=Backoff.fixed(10, jitter=0))
    def spin() -> None:
        raise RateLimited(retry_after=retry_after, reason="partner says 429")

    return spin


def _rate_limited_releases(job: Any) -> int:
    return sum(1 for h in job.history if str(h.get("note", "")).startswith("rate limited"))


def test_the_max_rate_limited_th_in_a_row_is_a_failure(app: Conveyor, clock: FakeClock) -> None:
    job = _spinner(app).enqueue()
    worker = app.worker(max_rate_limited=5)
    assert worker.run_until_idle(max_jobs=200) == 5  # 4 given back, the 5th fails
    j = job.refresh()
    assert j.state is JobState.RETRY_SCHEDULED and j.attempts == 1
    assert _rate_limited_releases(j) == 4
    [entry] = j.errors
    assert entry["kind"] == "error" and entry["type"] == "RateLimited"
    assert "5 times in a row" in entry["message"] and "partner says 429" in entry["message"]
    clock.advance(10)
    assert worker.run_until_idle(max_jobs=200) == 5  # a fresh run of 5 for the new attempt
    j = job.refresh()
    assert j.state is JobState.DEAD_LETTER and j.attempts == 2
    assert [e["kind"] for e in j.errors] == ["error", "error"]


def test_the_default_cap_is_twenty(app: Conveyor) -> None:
    job = _spinner(app).enqueue()
    assert app.worker().run_until_idle(max_jobs=200) == 20
    j = job.refresh()
    assert j.attempts == 1 and len(j.errors) == 1 and _rate_limited_releases(j) == 19


def test_no_cap_keeps_giving_the_job_back(app: Conveyor) -> None:
    job = _spinner(app).enqueue()
    assert app.worker(max_rate_limited=None).run_until_idle(max_jobs=60) == 60
    j = job.refresh()
    assert j.state is JobState.PENDING and j.attempts == 0 and j.errors == []


def test_a_run_is_counted_within_one_attempt_only(app: Conveyor, clock: FakeClock) -> None:
    """Rate limits of an earlier attempt (before an ordinary failure) do not count."""
    calls: list[int] = []

    @app.task(max_attempts=3, backoff=Backoff.fixed(10, jitter=0))
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 4:
            raise ValueError("boom")  # attempt 1 ends after 3 rate limits
        raise RateLimited(retry_after=0)

    job = flaky.enqueue()
    worker = app.worker(max_rate_limited=5)
    worker.run_until_idle(max_jobs=200)
    clock.advance(10)
    worker.run_until_idle(max_jobs=200)
    j = job.refresh()
    assert [e["type"] for e in j.errors] == ["ValueError", "RateLimited"]
    assert len(calls) == 4 + 5


@pytest.mark.parametrize("bad", [0, -1, 1.5, "5", True, 50])
def test_max_rate_limited_is_checked(app: Conveyor, bad: Any) -> None:
    with pytest.raises(ValidationError, match=r"^max_rate_limited: "):
        app.worker(max_rate_limited=bad)
