"""Contract: leases, fencing tokens, expiry and redelivery, poison pills, release, extend."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState, LeaseLost
from conveyor.broker.base import Ack, Broker


def claim_one(broker: Broker, now: float, vt: float = 30) -> object:
    leases = broker.claim(["default"], now, limit=1, visibility_timeout=vt, worker_id="w1")
    assert len(leases) == 1
    return leases[0]


def test_lease_expiry_redelivers_and_counts_lost(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t")
    first = app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=10)[0]
    assert first.expires_at == clock.now() + 10
    clock.advance(9.9)
    assert app.broker.reap_expired(clock.now()) == 0
    clock.advance(0.2)
    assert app.broker.reap_expired(clock.now()) == 1
    snap = app.get_job(job.id)
    assert snap.state is JobState.PENDING and snap.lost == 1
    assert snap.errors[-1]["kind"] == "worker_lost"
    second = app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=10)[0]
    assert second.job.attempts == 2 and second.token != first.token


def test_stale_token_is_refused_everywhere(app: Conveyor, clock: FakeClock) -> None:
    app.enqueue("t")
    stale = app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=5)[0]
    clock.advance(6)
    app.broker.reap_expired(clock.now())
    fresh = app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=5)[0]
    now = clock.now()
    assert app.broker.complete([Ack(stale.id, stale.token, "zombie")], now) == [False]
    assert app.broker.extend([(stale.id, stale.token)], now, 30) == [False]
    with pytest.raises(LeaseLost):
        app.broker.fail(stale.id, stale.token, now, error={"kind": "error"}, retry_at=None)
    with pytest.raises(LeaseLost):
        app.broker.release(stale.id, stale.token, now)
    assert app.get_job(fresh.id).state is JobState.ACTIVE
    assert app.broker.complete([Ack(fresh.id, fresh.token, "winner")], now) == [True]
    assert app.get_job(fresh.id).result == "winner"
    assert app.broker.complete([Ack(fresh.id, fresh.token, "again")], now) == [False]


def test_poison_pill_after_max_lost(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t")
    for expected_lost in (1, 2, 3):
        app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=5)
        clock.advance(6)
        app.broker.reap_expired(clock.now(), max_lost=3)
        assert app.get_job(job.id).lost == expected_lost
    snap = app.get_job(job.id)
    assert snap.state is JobState.DEAD_LETTER
    assert [e["kind"] for e in snap.errors] == ["worker_lost"] * 3


def test_extend_keeps_the_lease(app: Conveyor, clock: FakeClock) -> None:
    app.enqueue("t")
    app.enqueue("t")
    leases = app.broker.claim(["default"], clock.now(), limit=2, visibility_timeout=10)
    clock.advance(8)
    assert app.broker.extend([(x.id, x.token) for x in leases], clock.now(), 10) == [True, True]
    clock.advance(8)
    assert app.broker.reap_expired(clock.now()) == 0
    clock.advance(3)
    assert app.broker.reap_expired(clock.now()) == 2


def test_release_without_penalty_and_with_delay(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t")
    lease = app.broker.claim(["default"], clock.now(), limit=1)[0]
    state = app.broker.release(lease.id, lease.token, clock.now(), penalize=False, note="shutdown")
    snap = app.get_job(job.id)
    assert state is JobState.PENDING and snap.attempts == 0
    assert snap.history[-1]["event"] == "released" and snap.history[-1]["note"] == "shutdown"
    lease = app.broker.claim(["default"], clock.now(), limit=1)[0]
    assert lease.job.attempts == 1
    assert app.broker.release(lease.id, lease.token, clock.now(), delay=20) is JobState.SCHEDULED
    assert app.get_job(job.id).attempts == 1
    assert app.broker.claim(["default"], clock.now() + 19, limit=1) == []
    assert len(app.broker.claim(["default"], clock.now() + 20, limit=1)) == 1


def test_low_level_dequeue_ack_nack_extend(app: Conveyor, clock: FakeClock) -> None:
    # seed 004: redelivery after the visibility timeout with delivery count 2
    job = app.enqueue("payload", args=[{"n": 1}], idempotency_key="k1")
    assert app.enqueue("payload", args=[{"n": 1}], idempotency_key="k1").id == job.id
    d1 = app.dequeue("default", visibility_timeout=10)
    assert d1 is not None and d1.delivery_count == 1
    assert app.dequeue("default", visibility_timeout=10) is None
    clock.advance(11)
    app.broker.reap_expired(clock.now())
    d2 = app.dequeue("default", visibility_timeout=10)
    assert d2 is not None and d2.job.id == job.id and d2.delivery_count == 2
    with pytest.raises(LeaseLost):
        d1.ack()
    d2.extend(30)
    d2.nack(delay=5)
    assert app.dequeue("default") is None
    clock.advance(5)
    d3 = app.dequeue("default")
    assert d3 is not None and d3.delivery_count == 3
    d3.ack("done")
    assert app.get_job(job.id).state is JobState.COMPLETED


def test_claim_returns_an_expired_lease_at_its_deadline(app: Conveyor, clock: FakeClock) -> None:
    """SQS semantics: no reaper pass needed, the next claim after the deadline gets the job."""
    job = app.enqueue("t")
    first = app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=10)[0]
    clock.advance(9.5)
    assert app.broker.claim(["default"], clock.now(), limit=1) == []  # still leased
    clock.advance(0.5)
    again = app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=10)
    assert [lease.id for lease in again] == [job.id] and again[0].token != first.token
    snap = again[0].job
    assert snap.attempts == 2 and snap.lost == 1 and snap.errors[-1]["kind"] == "worker_lost"
    events = [e["type"] for e in app.broker.events_read(None, 100)[0] if e.get("job_id") == job.id]
    assert events[-2:] == ["lease_lost", "started"]


def test_claim_honours_max_lost_for_expired_leases(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t")
    for _ in range(2):
        assert app.broker.claim(["default"], clock.now(), visibility_timeout=5, max_lost=2)
        clock.advance(6)
    assert app.broker.claim(["default"], clock.now(), visibility_timeout=5, max_lost=2) == []
    snap = app.get_job(job.id)
    assert snap.state is JobState.DEAD_LETTER and snap.lost == 2
    assert [e["kind"] for e in snap.errors] == ["worker_lost"] * 2


def test_an_empty_claim_reports_the_next_due_time(app: Conveyor, clock: FakeClock) -> None:
    t0 = clock.now()
    assert app.broker.claim(["default"], t0).next_due is None  # nothing at all
    app.enqueue("t", delay=30)
    assert app.broker.claim(["default"], t0).next_due == t0 + 30  # a delayed job
    app.enqueue("t")
    leased = app.broker.claim(["default"], t0, visibility_timeout=10)
    assert len(leased) == 1 and leased.next_due is None  # only reported when empty
    assert app.broker.claim(["default"], t0).next_due == t0 + 10  # a lease deadline is earlier
    clock.advance(10)
    assert len(app.broker.claim(["default"], clock.now(), visibility_timeout=60)) == 1
    assert app.broker.claim(["default"], clock.now()).next_due == t0 + 30


def test_a_batch_completion_refuses_only_its_stale_ack(app: Conveyor, clock: FakeClock) -> None:
    for n in range(3):
        app.enqueue("t", args=[n])
    first = app.broker.claim(["default"], clock.now(), limit=3, visibility_timeout=5)
    by_arg = {lease.job.args[0]: lease for lease in first}
    clock.advance(6)  # every lease expires; the middle job is claimed again by another worker
    app.broker.reap_expired(clock.now())
    again = app.broker.claim(["default"], clock.now(), limit=3, visibility_timeout=60)
    fresh = {lease.job.args[0]: lease for lease in again}
    middle = by_arg[1]
    acks = [Ack(fresh[0].id, fresh[0].token, "a"), Ack(middle.id, middle.token, "zombie")]
    acks.append(Ack(fresh[2].id, fresh[2].token, "c"))
    assert app.broker.complete(acks, clock.now()) == [True, False, True]
    assert [app.get_job(lease.id).result for lease in (fresh[0], fresh[2])] == ["a", "c"]
    snap = app.get_job(middle.id)
    assert snap.state is JobState.ACTIVE and snap.attempts == 2 and snap.result is None
    assert app.broker.complete([Ack(middle.id, fresh[1].token, "b")], clock.now()) == [True]
    assert app.get_job(middle.id).result == "b"


def test_the_same_ack_twice_in_one_batch_counts_once(app: Conveyor, clock: FakeClock) -> None:
    app.enqueue("t")
    lease = claim_one(app.broker, clock.now())
    acks = [Ack(lease.id, lease.token, "one"), Ack(lease.id, lease.token, "two")]  # type: ignore[attr-defined]
    assert app.broker.complete(acks, clock.now()) == [True, False]
    snap = app.get_job(lease.id)  # type: ignore[attr-defined]
    assert snap.state is JobState.COMPLETED and snap.result == "one"
    assert app.broker.counts()["default"]["completed"] == 1


def test_a_claimed_job_reads_back_with_its_lease(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t", args=[1])
    lease = app.broker.claim(
        ["default"], clock.now(), limit=1, visibility_timeout=30, worker_id="w9"
    )[0]
    snap = app.get_job(job.id)
    assert (snap.state, snap.attempts, snap.worker_id) == (JobState.ACTIVE, 1, "w9")
    assert (snap.started_at, snap.lease_expires_at) == (clock.now(), clock.now() + 30)
    assert snap.args == [1] and lease.job.attempts == 1
    clock.advance(1)
    assert app.broker.extend([(lease.id, lease.token)], clock.now(), 30) == [True]
    snap = app.get_job(job.id)
    assert (snap.attempts, snap.worker_id, snap.lease_expires_at) == (1, "w9", clock.now() + 30)
