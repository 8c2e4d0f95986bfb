"""Contract: ``expires_in`` (a job not started in time never runs: state expired, requeueable)."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState, ValidationError


def test_expired_job_never_runs(app: Conveyor, clock: FakeClock) -> None:
    ran: list[int] = []

    @app.task(name="flow.exp")
    def exp(x: int) -> None:
        ran.append(x)

    late = exp.options(expires_in=60).enqueue(1)
    fresh = exp.options(expires_in=3600).enqueue(2)
    plain = exp.enqueue(3)
    clock.advance(61)
    app.worker().run_until_idle()
    assert sorted(ran) == [2, 3]
    snap = late.refresh()
    assert snap.state is JobState.EXPIRED and snap.attempts == 0
    assert snap.finished_at == pytest.approx(clock.now(), abs=1e-3)
    assert fresh.refresh().state is JobState.COMPLETED
    assert plain.refresh().state is JobState.COMPLETED
    assert app.stats()["queues"]["default"]["expired"] == 1


def test_expired_job_is_visible_and_requeueable(app: Conveyor, clock: FakeClock) -> None:
    ran: list[int] = []

    @app.task(name="flow.exp2")
    def exp2(x: int) -> None:
        ran.append(x)

    job = exp2.options(expires_in=5).enqueue(7)
    clock.advance(10)
    assert app.broker.claim(["default"], clock.now(), limit=5) == []
    assert [j.id for j in app.search(state="expired").items] == [job.id]
    assert app.requeue_dead(job.id)
    snap = job.refresh()
    assert snap.state is JobState.PENDING and snap.history[-1]["event"] == "requeued"
    app.worker().run_until_idle()
    assert ran == [7] and job.refresh().state is JobState.COMPLETED


def test_expiry_counts_from_enqueue_not_from_run_at(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t", delay=120, expires_in=60)
    clock.advance(121)
    assert app.broker.claim(["default"], clock.now(), limit=5) == []
    assert job.refresh().state is JobState.EXPIRED


def test_bad_expires_in_is_refused(app: Conveyor) -> None:
    for bad in (-1, float("nan"), "10", True):
        with pytest.raises(ValidationError, match="expires_in"):
            app.enqueue("t", expires_in=bad)
