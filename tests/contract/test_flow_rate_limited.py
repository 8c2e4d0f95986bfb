"""Contract: ``RateLimited(retry_after=)`` reschedules without spending an attempt or a failure."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState, RateLimited, ValidationError


def test_rate_limited_reschedules_without_an_attempt(app: Conveyor, clock: FakeClock) -> None:
    calls: list[float] = []

    @app.task(name="flow.partner", max_attempts=1)
    def partner() -> str:
        calls.append(clock.now())
        if len(calls) < 4:
            raise RateLimited(retry_after=30)
        return "ok"

    job = partner.enqueue()
    worker = app.worker()
    for _ in range(3):
        worker.run_until_idle()
        snap = job.refresh()
        assert snap.state is JobState.SCHEDULED, "one attempt allowed, yet not dead: no attempt"
        assert snap.attempts == 0 and snap.errors == [] and snap.run_at == clock.now() + 30
        assert "rate limited" in snap.history[-1]["note"]
        clock.advance(30)
    worker.run_until_idle()
    assert job.refresh().state is JobState.COMPLETED and job.refresh().result == "ok"
    assert len(calls) == 4
    assert worker.failed == 0


def test_rate_limited_refuses_a_bad_retry_after() -> None:
    for bad in (-1, float("nan"), "3"):
        with pytest.raises(ValidationError, match="retry_after"):
            RateLimited(retry_after=bad)  # type: ignore[arg-type]
    assert RateLimited().retry_after == 1.0


def test_rate_limited_survives_pickling() -> None:
    import pickle

    back = pickle.loads(pickle.dumps(RateLimited(retry_after=12.5, reason="429")))
    assert isinstance(back, RateLimited) and back.retry_after == 12.5 and back.reason == "429"
