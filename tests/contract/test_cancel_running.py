"""Contract (issue 16): cancelling a RUNNING job and job progress, on every backend.

* ``Broker.cancel_running``: active → cancelled by the lease holder only (fenced), the lease
  dropped at once, never retried, recorded in history and events;
* ``app.cancel`` on an active job stores a cancel request (``broker/jobdocs.py``) that any
  worker can read; requeue forgets it;
* progress: ``JobBoard`` writes at most one progress document per job per interval (FakeClock),
  and ``job.progress`` reads the latest.
"""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState, LeaseLost, ValidationError, current_job
from conveyor.broker.base import Ack, Lease
from conveyor.broker.jobdocs import cancel_requested
from conveyor.worker.jobctx import PROGRESS_INTERVAL, JobBoard
from conveyor.worker.logs import job_context
from conveyor.worker.running import Running


def _claim(app: Conveyor, now: float, vt: float = 30) -> Lease:
    leases = app.broker.claim(["default"], now, limit=1, visibility_timeout=vt, worker_id="w1")
    assert len(leases) == 1
    return leases[0]


def test_the_holder_cancels_a_running_job_and_its_lease_is_gone(
    app: Conveyor, clock: FakeClock
) -> None:
    job = app.enqueue("t")
    lease = _claim(app, clock.now())
    clock.advance(2)
    state = app.broker.cancel_running(lease.id, lease.token, clock.now(), note="stopped by ops")
    assert state is JobState.CANCELLED
    snap = app.get_job(job.id)
    assert snap.state is JobState.CANCELLED and snap.finished_at == clock.now()
    assert snap.lease_expires_at is None and snap.attempts == 1
    entry = snap.history[-1]
    assert entry["event"] == "cancelled" and entry["note"] == "stopped by ops"
    assert app.broker.counts()["default"]["cancelled"] == 1
    assert app.broker.counts()["default"]["active"] == 0
    # the token is dead everywhere: nothing completes, extends, fails or releases it
    now = clock.now()
    assert app.broker.complete([Ack(lease.id, lease.token, "late")], now) == [False]
    assert app.broker.extend([(lease.id, lease.token)], now, 30) == [False]
    with pytest.raises(LeaseLost):
        app.broker.release(lease.id, lease.token, now)
    with pytest.raises(LeaseLost):
        app.broker.cancel_running(lease.id, lease.token, now)
    # never retried: the old lease deadline passes, nothing is reaped or claimable
    clock.advance(120)
    assert app.broker.reap_expired(clock.now()) == 0
    assert app.broker.claim(["default"], clock.now(), limit=1, worker_id="w2") == []
    assert app.get_job(job.id).state is JobState.CANCELLED
    events, _ = app.broker.events_read(None, 100)
    assert any(e["type"] == "cancelled" and e["job_id"] == job.id for e in events)


def test_cancel_running_is_fenced(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t")
    stale = _claim(app, clock.now(), vt=5)
    clock.advance(6)
    app.broker.reap_expired(clock.now())
    fresh = _claim(app, clock.now(), vt=5)
    with pytest.raises(LeaseLost):
        app.broker.cancel_running(stale.id, stale.token, clock.now())
    assert app.get_job(job.id).state is JobState.ACTIVE  # the new holder keeps it
    assert app.broker.cancel_running(fresh.id, fresh.token, clock.now()) is JobState.CANCELLED


def test_cancel_running_refuses_a_job_that_is_not_active(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t")
    with pytest.raises(LeaseLost):
        app.broker.cancel_running(job.id, "1:default", clock.now())
    assert app.get_job(job.id).state is JobState.PENDING


def test_app_cancel_of_a_running_job_stores_a_request(app: Conveyor, clock: FakeClock) -> None:
    running = app.enqueue("t")
    lease = _claim(app, clock.now())
    waiting = app.enqueue("t")
    assert lease.id == running.id
    assert cancel_requested(app.broker, {running.id, waiting.id}, clock.now()) == set()
    assert app.cancel(running.id) is True
    # the job keeps running until its worker stops it; the request is visible to any worker
    assert app.get_job(running.id).state is JobState.ACTIVE
    assert cancel_requested(app.broker, {running.id, waiting.id}, clock.now()) == {running.id}
    assert app.cancel(waiting.id) is True  # a waiting job: cancelled at once, as before
    assert app.get_job(waiting.id).state is JobState.CANCELLED
    # the worker records it; a requeue forgets the old request
    app.broker.cancel_running(lease.id, lease.token, clock.now())
    assert app.cancel(running.id) is False  # finished
    assert app.requeue_dead(running.id) is True
    assert cancel_requested(app.broker, {running.id}, clock.now()) == set()


def test_progress_is_throttled_and_readable(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t")
    lease = _claim(app, clock.now())
    board = JobBoard(app.broker, clock.now)
    run = Running(lease, None, "thread", None)
    board.add([run])
    from conveyor.worker import jobctx

    ctx = board.context(run)
    assert (ctx.id, ctx.attempt, ctx.task, ctx.queue) == (job.id, 1, "t", "default")
    token = job_context.set(lease.job)  # what every executor sets around a handler
    try:
        assert current_job() is ctx and not ctx.cancelled
    finally:
        job_context.reset(token)
    with pytest.raises(RuntimeError, match="only available inside a job handler"):
        current_job()
    for i in range(10_000):  # a tight loop: nothing is written by the reports themselves
        ctx.progress(i / 10_000, f"step {i}")
    assert job.progress is None
    assert board.flush(clock.now()) == 1
    assert job.refresh().progress is not None
    assert job.progress["fraction"] == 9_999 / 10_000 and job.progress["message"] == "step 9999"
    ctx.progress(0.5, "half")
    clock.advance(PROGRESS_INTERVAL / 2)
    assert board.flush(clock.now()) == 0  # too soon after the last write
    assert job.progress["message"] == "step 9999"
    clock.advance(PROGRESS_INTERVAL / 2)
    assert board.flush(clock.now()) == 1
    assert job.progress["message"] == "half" and job.progress["attempt"] == 1
    assert board.flush(clock.now() + 10) == 0  # nothing new: nothing written
    ctx.progress(1.0, "done")
    board.remove([run])  # the job ended: its last report is written at once
    assert job.progress["fraction"] == 1.0 and job.progress["message"] == "done"
    assert job.id not in jobctx._active


@pytest.mark.parametrize(
    ("fraction", "message", "field"),
    [
        (1.5, "", "fraction"),
        (-0.1, "", "fraction"),
        (float("nan"), "", "fraction"),
        (True, "", "fraction"),
        ("0.5", "", "fraction"),
        (0.5, 7, "message"),
    ],
)
def test_bad_progress_is_a_validation_error(
    app: Conveyor, clock: FakeClock, fraction: object, message: object, field: str
) -> None:
    job = app.enqueue("t")
    board = JobBoard(app.broker, clock.now)
    ctx = board.context(Running(_claim(app, clock.now()), None, "thread", None))
    assert ctx.id == job.id
    with pytest.raises(ValidationError) as err:
        ctx.progress(fraction, message)  # type: ignore[arg-type]
    assert err.value.field == field
