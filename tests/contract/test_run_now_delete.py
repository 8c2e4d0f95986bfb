"""Contract: ``run_now`` (a delayed or retrying job becomes due now) and ``delete_job`` (remove
any job that is not running), on every backend."""

from __future__ import annotations

from conveyor import Conveyor, FakeClock, JobState
from conveyor.broker.base import Broker


def retrying_job(app: Conveyor, broker: Broker) -> str:
    """A job in ``retry_scheduled`` (failed once, next attempt in the future)."""

    @app.task(name="flaky", max_retries=5)
    def flaky() -> None:
        raise RuntimeError("try again")

    job = flaky.enqueue()
    app.worker().run_until_idle()
    snap = broker.get(job.id)
    assert snap is not None and snap.state is JobState.RETRY_SCHEDULED
    return job.id


def test_run_now_makes_a_scheduled_job_due(app: Conveyor, broker: Broker, clock: FakeClock) -> None:
    job = app.runtime.enqueue("t", delay=3600)
    assert broker.claim(["default"], clock.now(), limit=1) == []
    assert broker.run_now(job.id, clock.now())
    snap = broker.get(job.id)
    assert snap is not None and snap.state is JobState.PENDING and snap.run_at == clock.now()
    leases = broker.claim(["default"], clock.now(), limit=1)
    assert [lease.id for lease in leases] == [job.id]


def test_run_now_of_a_retrying_job_keeps_attempts(
    app: Conveyor, broker: Broker, clock: FakeClock
) -> None:
    job_id = retrying_job(app, broker)
    assert broker.run_now(job_id, clock.now())
    snap = broker.get(job_id)
    assert snap is not None and snap.state is JobState.PENDING and snap.attempts == 1
    assert snap.errors, "the failure stays in the job's history"
    assert [lease.id for lease in broker.claim(["default"], clock.now(), limit=1)] == [job_id]


def test_run_now_refuses_other_states(app: Conveyor, broker: Broker, clock: FakeClock) -> None:
    pending = app.runtime.enqueue("t")
    running = app.runtime.enqueue("t", priority=-1)
    broker.claim(["default"], clock.now(), limit=1, visibility_timeout=3600)
    cancelled = app.runtime.enqueue("t", delay=60)
    app.cancel(cancelled.id)
    for job_id in (pending.id, running.id, cancelled.id, "no-such-job"):
        assert not broker.run_now(job_id, clock.now()), job_id
    assert pending.refresh().state is JobState.PENDING
    assert running.refresh().state is JobState.ACTIVE


def test_delete_removes_any_job_that_is_not_running(
    app: Conveyor, broker: Broker, clock: FakeClock
) -> None:
    retrying = retrying_job(app, broker)
    pending = app.runtime.enqueue("t").id
    scheduled = app.runtime.enqueue("t", delay=60).id
    cancelled = app.runtime.enqueue("t", delay=60).id
    app.cancel(cancelled)
    for job_id in (retrying, pending, scheduled, cancelled):
        assert broker.delete_job(job_id, clock.now()), job_id
        assert broker.get(job_id) is None
        assert not broker.delete_job(job_id, clock.now()), "a second delete finds nothing"
    assert sum(sum(c.values()) for c in broker.counts().values()) == 0
    clock.advance(7200)
    assert broker.claim(["default"], clock.now(), limit=10) == []


def test_delete_refuses_a_running_job(app: Conveyor, broker: Broker, clock: FakeClock) -> None:
    job = app.runtime.enqueue("t")
    lease = broker.claim(["default"], clock.now(), limit=1)[0]
    assert not broker.delete_job(job.id, clock.now())
    from conveyor.broker.base import Ack

    assert broker.complete([Ack(lease.id, lease.token)], clock.now()) == [True]
    assert broker.delete_job(job.id, clock.now()), "a completed job can be deleted"
    assert broker.get(job.id) is None


def test_delete_releases_the_jobs_idempotency_key(
    app: Conveyor, broker: Broker, clock: FakeClock
) -> None:
    """After ``delete_job`` the job's idempotency key is free again: enqueueing with it stores
    a new job (it used to return the deleted job's id with ``duplicate=True``)."""
    first = app.runtime.enqueue("t", idempotency_key="order-1")
    assert broker.delete_job(first.id, clock.now())
    again = app.runtime.enqueue("t", idempotency_key="order-1")
    assert not again.duplicate and again.id != first.id
    assert broker.get(again.id) is not None
    dup = app.runtime.enqueue("t", idempotency_key="order-1")
    assert dup.duplicate and dup.id == again.id, "the key holds the new job"


def test_delete_leaves_a_key_that_moved_to_another_job(
    app: Conveyor, broker: Broker, clock: FakeClock
) -> None:
    """Fenced: a key whose TTL ran out and that a newer job took stays with that job when the
    old job is deleted."""
    old = app.runtime.enqueue("t", idempotency_key="k", idempotency_ttl=10, delay=3600)
    clock.advance(11)
    new = app.runtime.enqueue("t", idempotency_key="k", idempotency_ttl=600)
    assert not new.duplicate and new.id != old.id
    assert broker.delete_job(old.id, clock.now())
    dup = app.runtime.enqueue("t", idempotency_key="k", idempotency_ttl=600)
    assert dup.duplicate and dup.id == new.id
