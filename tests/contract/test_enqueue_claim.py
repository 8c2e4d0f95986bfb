"""Contract: enqueue, ordering (FIFO, priority, queues), delays, idempotency, atomic bulk."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, DuplicateJob, FakeClock, JobState, PayloadTooLarge, ValidationError
from conveyor.broker.base import Broker


def names(app: Conveyor, n: int = 100) -> list[str]:
    """Run jobs inline and return the first arg of each in execution order."""
    order: list[str] = []
    w = app.worker(queues=app_queues(app), strict=True)
    while len(order) < n:
        leases = app.broker.claim(w.selector.order(), app.now(), limit=1, worker_id="t")
        if not leases:
            break
        order.append(leases[0].job.args[0])
        from conveyor.broker.base import Ack

        assert app.broker.complete([Ack(leases[0].id, leases[0].token)], app.now()) == [True]
    return order


def app_queues(app: Conveyor) -> list[str]:
    return sorted(app.broker.queues()) or ["default"]


def test_fifo_within_a_queue(app: Conveyor) -> None:
    for i in range(10):
        app.enqueue("t", args=[f"j{i}"])
    assert names(app) == [f"j{i}" for i in range(10)]


def test_lower_priority_runs_first_then_fifo(app: Conveyor) -> None:
    # seed 002: priorities 3, 1, 2 submitted in that order run as 1, 2, 3
    for prio, name in [(3, "c"), (1, "a1"), (2, "b"), (1, "a2"), (-5, "urgent")]:
        app.enqueue("t", args=[name], priority=prio)
    assert names(app) == ["urgent", "a1", "a2", "b", "c"]


def test_strict_queue_order(app: Conveyor) -> None:
    for i in range(3):
        app.enqueue("t", args=[f"low{i}"], queue="low")
        app.enqueue("t", args=[f"high{i}"], queue="high")
    leases = app.broker.claim(["high", "low"], app.now(), limit=10, worker_id="w")
    assert [lease.job.args[0] for lease in leases] == [
        "high0",
        "high1",
        "high2",
        "low0",
        "low1",
        "low2",
    ]


def test_weighted_queues_share_without_starvation(app: Conveyor) -> None:
    for i in range(30):
        app.enqueue("t", args=[f"h{i}"], queue="high")
        app.enqueue("t", args=[f"l{i}"], queue="low")
    worker = app.worker(queues="high:3,low:1")
    first_twelve = []
    for _ in range(12):
        lease = app.broker.claim(worker.selector.order(), app.now(), limit=1, worker_id="w")[0]
        first_twelve.append(lease.job.queue)
    assert first_twelve.count("high") == 9 and first_twelve.count("low") == 3


def test_claim_takes_at_most_limit(app: Conveyor) -> None:
    for i in range(5):
        app.enqueue("t", args=[i])
    leases = app.broker.claim(["default"], app.now(), limit=3, worker_id="w")
    assert len(leases) == 3
    assert all(lease.job.state is JobState.ACTIVE and lease.job.attempts == 1 for lease in leases)
    assert len({lease.token for lease in leases}) == 3
    assert app.stats()["queues"]["default"]["pending"] == 2


def test_delayed_job_invisible_until_due(app: Conveyor, clock: FakeClock) -> None:
    job = app.enqueue("t", args=["later"], delay=30)
    assert job.state is JobState.SCHEDULED
    assert app.broker.claim(["default"], clock.now(), limit=1) == []
    clock.advance(29.999)
    assert app.broker.claim(["default"], clock.now(), limit=1) == []
    clock.advance(0.001)
    leases = app.broker.claim(["default"], clock.now(), limit=1)
    assert [lease.id for lease in leases] == [job.id]


def test_delayed_job_keeps_priority_when_due(app: Conveyor, clock: FakeClock) -> None:
    app.enqueue("t", args=["normal"], priority=5)
    app.enqueue("t", args=["urgent-later"], priority=0, delay=10)
    clock.advance(10)
    assert names(app) == ["urgent-later", "normal"]


def test_promote_due_moves_only_due_jobs(app: Conveyor, clock: FakeClock) -> None:
    a = app.enqueue("t", args=[1], delay=5)
    b = app.enqueue("t", args=[2], delay=50)
    clock.advance(6)
    assert app.broker.promote_due(clock.now()) == 1
    assert app.get_job(a.id).state is JobState.PENDING
    assert app.get_job(b.id).state is JobState.SCHEDULED


def test_idempotency_key_inside_and_after_ttl(app: Conveyor, clock: FakeClock) -> None:
    first = app.enqueue("t", args=[1], idempotency_key="k", idempotency_ttl=60)
    again = app.enqueue("t", args=[2], idempotency_key="k")
    assert again.id == first.id and again.duplicate and not first.duplicate
    assert app.stats()["queues"]["default"]["pending"] == 1
    clock.advance(61)
    later = app.enqueue("t", args=[3], idempotency_key="k")
    assert later.id != first.id and not later.duplicate


def test_explicit_job_id_must_be_unique(app: Conveyor) -> None:
    app.enqueue("t", job_id="order-1")
    with pytest.raises(DuplicateJob):
        app.enqueue("t", job_id="order-1")


def test_enqueue_many_is_all_or_nothing(app: Conveyor) -> None:
    from conveyor.task import JobSpec

    good = JobSpec("t", (1,), {}, {})
    bad = JobSpec("t", (object(),), {}, {})
    with pytest.raises(ValidationError, match=r"args\[0\]"):
        app.enqueue_many([good, good, bad])
    assert app.search().total == 0
    app.enqueue("t", job_id="taken")
    with pytest.raises(DuplicateJob):
        app.enqueue_many([good, JobSpec("t", (), {}, {"job_id": "taken"})])
    assert app.search().total == 1
    jobs = app.enqueue_many([JobSpec("t", (i,), {}, {}) for i in range(5)])
    assert [j.args for j in jobs] == [[i] for i in range(5)]
    assert app.search().total == 6


def test_enqueue_many_dedups_within_the_batch(app: Conveyor) -> None:
    from conveyor.task import JobSpec

    spec = JobSpec("t", (), {}, {"idempotency_key": "same"})
    a, b = app.enqueue_many([spec, spec])
    assert a.id == b.id and b.duplicate and not a.duplicate


def test_payload_over_limit_refused_before_storage(app: Conveyor) -> None:
    with pytest.raises(PayloadTooLarge):
        app.enqueue("t", args=["x" * (1024 * 1024 + 1)])
    assert app.search().total == 0


def test_round_trip_of_typed_arguments(app: Conveyor) -> None:
    import datetime as dt
    import uuid
    from decimal import Decimal

    args = [
        dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        dt.date(2024, 1, 2),
        Decimal("1.10"),
        uuid.UUID(int=7),
        b"\x00\xff",
        {"$dt": "not a date"},
    ]
    job = app.enqueue("t", args=args)
    assert app.get_job(job.id).args == args


def test_peek_shows_claim_order_without_claiming(app: Conveyor) -> None:
    app.enqueue("t", args=["b"], priority=2)
    app.enqueue("t", args=["a"], priority=1)
    assert [j.args[0] for j in app.peek("default", 5)] == ["a", "b"]
    assert app.stats()["queues"]["default"]["pending"] == 2


def test_counts_cover_every_state(broker: Broker, app: Conveyor) -> None:
    app.enqueue("t", queue="q1")
    counts = broker.counts()["q1"]
    assert set(counts) == {s.value for s in JobState}
    assert counts["pending"] == 1
