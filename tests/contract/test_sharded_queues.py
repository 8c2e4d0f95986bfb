"""Contract: sharded queues (issue 18) keep a queue's meaning on every backend.

``app.queue("events", shards=N)`` spreads one logical queue over N physical queues; these tests
run on memory, SQLite, Redis (and PostgreSQL) and, through tests/redis/test_cluster_contract.py,
on a real 3-master Redis Cluster: enqueue and claim across shards, fair claiming (no shard
starved), idempotency keys deduplicated across shards, ``shard_by`` order per key, delays,
priorities, retries, pause/resume of the logical queue, counts and status folded into one
logical row with per-shard depth, clear, and flow-controlled tasks kept on one shard.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from conveyor import Backoff, Conveyor, FakeClock, JobState, ValidationError
from conveyor.monitoring.actions import Operator
from conveyor.monitoring.inspect import Inspector
from conveyor.task import JobSpec


def sharded(app: Conveyor, n: int = 4, **options: Any) -> tuple[str, ...]:
    """Declare ``events`` with ``n`` shards; its shard names."""
    app.queue("events", shards=n, **options)
    sq = app.runtime.shards.get("events")
    assert sq is not None
    return sq.names


def test_enqueue_round_robins_and_a_worker_drains_every_shard(app: Conveyor) -> None:
    names = sharded(app, 4)

    @app.task(queue="events")
    def record(i: int) -> int:
        return i

    handles = [record.enqueue(i) for i in range(12)]
    assert Counter(h.queue for h in handles) == {name: 3 for name in names}
    stats = app.stats()["queues"]
    assert set(stats) == {"events"}, "one logical entry, not one per shard"
    assert stats["events"]["pending"] == 12
    assert {q: c["pending"] for q, c in stats["events"]["shards"].items()} == dict.fromkeys(
        names, 3
    )
    worker = app.worker()  # serves "events" (the task's queue): all its shards
    assert set(worker.queues) == {*names, "events", "default"}
    assert worker.run_until_idle() == 12
    assert [h.refresh().result for h in handles] == list(range(12))


def test_bulk_enqueue_keeps_one_batch_in_one_shard(app: Conveyor) -> None:
    names = sharded(app, 3)
    first = app.enqueue_many([JobSpec("t", (i,), {}, {"queue": "events"}) for i in range(5)])
    second = app.enqueue_many([JobSpec("t", (i,)) for i in range(5)])  # default queue: plain
    assert len({h.queue for h in first}) == 1 and first[0].queue in names
    assert {h.queue for h in second} == {"default"}
    nxt = app.enqueue("t", queue="events")
    assert nxt.queue in names and nxt.queue != first[0].queue  # the next call, the next shard


def test_claims_rotate_over_shards_so_none_starves(app: Conveyor) -> None:
    names = sharded(app, 4)
    for i in range(30):  # one hot shard
        app.enqueue("t", (i,), queue=names[0])
    for name in names[1:]:
        app.enqueue("t", queue=name)

    @app.task(name="t")
    def t(i: int = 0) -> None: ...

    worker = app.worker(queues=["events"])
    served = []
    for _ in range(len(names)):
        before = {q: app.broker.counts().get(q, {}).get("completed", 0) for q in names}
        assert worker.process_next()
        after = {q: app.broker.counts().get(q, {}).get("completed", 0) for q in names}
        served += [q for q in names if after[q] > before[q]]
    assert sorted(served) == sorted(names), "each shard got a claim within N claims"


def test_idempotency_key_dedupes_across_shards(app: Conveyor) -> None:
    sharded(app, 8)
    first = app.enqueue("t", queue="events", idempotency_key="order-17")
    again = [app.enqueue("t", queue="events", idempotency_key="order-17") for _ in range(8)]
    assert all(h.duplicate and h.id == first.id for h in again)
    other = app.enqueue("t", queue="events", idempotency_key="order-18")
    assert not other.duplicate
    assert app.stats()["queues"]["events"]["pending"] == 2


def test_shard_by_keeps_one_key_in_order(app: Conveyor) -> None:
    sharded(app, 4, shard_by="customer_id")
    seen: list[tuple[int, int]] = []

    @app.task(queue="events")
    def charge(customer_id: int, n: int) -> None:
        seen.append((customer_id, n))

    handles = {c: [charge.enqueue(c, n) for n in range(5)] for c in range(6)}
    handles[0].append(charge.enqueue(customer_id=0, n=5))  # by keyword: the same shard
    for jobs in handles.values():
        assert len({h.queue for h in jobs}) == 1
    assert len({jobs[0].queue for jobs in handles.values()}) > 1
    app.worker().run_until_idle()
    for c in range(6):
        assert [n for cid, n in seen if cid == c] == list(range(len(handles[c])))


def test_delays_priorities_and_retries_keep_their_meaning(app: Conveyor, clock: FakeClock) -> None:
    sharded(app, 2)
    calls: Counter[str] = Counter()
    order: list[str] = []

    @app.task(queue="events", max_attempts=2, backoff=Backoff.fixed(30))
    def work(tag: str) -> str:
        calls[tag] += 1
        order.append(tag)
        if tag == "flaky" and calls[tag] == 1:
            raise RuntimeError("once")
        return tag

    later = work.options(delay=60).enqueue("later")
    flaky = work.enqueue("flaky")
    worker = app.worker()
    assert worker.run_until_idle() == 1
    assert later.refresh().state is JobState.SCHEDULED
    assert flaky.refresh().state is JobState.RETRY_SCHEDULED
    clock.advance(61)
    assert worker.run_until_idle() == 2
    assert later.refresh().result == "later" and flaky.refresh().result == "flaky"
    # priority orders jobs within a shard (a batch lands in one shard)
    low, high = app.enqueue_many(
        [
            JobSpec("work", ("low",), {}, {"priority": 5}),
            JobSpec("work", ("high",), {}, {"priority": -5}),
        ]
    )
    assert low.queue == high.queue
    worker.run_until_idle()
    assert order[-2:] == ["high", "low"]


def test_pause_and_resume_the_logical_queue(app: Conveyor) -> None:
    names = sharded(app, 3)
    for i in range(6):
        app.enqueue("t", (i,), queue="events")

    @app.task(name="t")
    def t(i: int) -> None: ...

    app.pause("events")
    assert set(names) <= app.broker.paused_queues()
    worker = app.worker(queues=["events"])
    assert worker.run_until_idle() == 0
    assert app.stats()["queues"]["events"]["paused"] is True
    [row] = [r for r in Inspector(app).queues() if r["name"] == "events"]
    assert row["paused"] and row["depth"] == 6
    assert [s["depth"] for s in row["shards"]] == [2, 2, 2]
    assert [s["name"] for s in row["shards"]] == list(names)
    app.resume("events")
    assert not set(names) & app.broker.paused_queues()
    assert worker.run_until_idle() == 6


def test_clear_queue_clears_every_shard(app: Conveyor) -> None:
    sharded(app, 3)
    for i in range(7):
        app.enqueue("t", (i,), queue="events")
    other = app.enqueue("t", queue="mail")
    assert Operator(app, "test").inspector.queue("events")["depth"] == 7
    assert len(Operator(app, "test").inspector.queue("events")["next"]) == 7
    from conveyor.monitoring.ops import clear_queue

    assert clear_queue(Operator(app, "test"), "events") == 7
    assert app.stats()["queues"]["events"]["pending"] == 0
    assert other.refresh().state is JobState.PENDING


def test_jobs_stored_before_sharding_still_run(app: Conveyor) -> None:
    old = app.enqueue("t", queue="events")
    sharded(app, 2)
    new = app.enqueue("t", queue="events")
    assert old.queue == "events" and new.queue != "events"

    @app.task(name="t")
    def t() -> None: ...

    assert app.worker(queues="events").run_until_idle() == 2
    assert app.stats()["queues"]["events"]["completed"] == 2


def test_flow_controlled_jobs_stay_on_one_shard(app: Conveyor, clock: FakeClock) -> None:
    if not getattr(app.broker, "supports_flow", False):
        pytest.skip(f"flow control is not implemented on {type(app.broker).__name__} yet")
    names = sharded(app, 4)

    @app.task(queue="events", rate_limit="2/s")
    def partner(i: int) -> None: ...

    handles = [partner.enqueue(i) for i in range(6)]
    handles.append(partner.options(idempotency_key="k").enqueue(6))
    assert {h.queue for h in handles} == {names[0]}  # one bucket: the limit stays global
    worker = app.worker()
    assert worker.run_until_idle() == 2, "the 2/s bucket holds across the logical queue"
    clock.advance(0.5)
    assert worker.run_until_idle() == 1


def test_queue_wide_limits_and_shards_are_refused_together(app: Conveyor) -> None:
    with pytest.raises(ValidationError, match="sharded queue takes no queue-wide"):
        app.queue("events", shards=4, rate_limit="10/s")
    with pytest.raises(ValidationError, match="shards"):
        app.queue("events", shards=0)
    assert app.runtime.shards.get("events") is None


def test_peek_dequeue_purge_and_depth_alerts_see_the_logical_queue(
    app: Conveyor, clock: FakeClock
) -> None:
    from conveyor.monitoring.rules import AlertContext, QueueDepth

    names = sharded(app, 3)
    handles = [app.enqueue("t", (i,), queue="events") for i in range(3)]
    assert {h.id for h in app.peek("events")} == {h.id for h in handles}
    violations = QueueDepth(threshold=2, queue="events").check(AlertContext(app.runtime, 0.0))
    assert [(v.subject, v.value) for v in violations] == [("events", 3)]
    got = [app.dequeue("events") for _ in range(4)]
    assert got[3] is None and {d.job.queue for d in got[:3] if d} == set(names)
    for d in got[:3]:
        assert d is not None
        d.fail("no")
    assert app.stats()["queues"]["events"]["dead_letter"] == 3
    assert app.purge_dead(queue="events") == 3


def test_history_of_a_sharded_queue_counts_every_shard(app: Conveyor) -> None:
    """``conveyor history --queue events``, ``GET /api/v1/history?queue=events`` and the
    history page read the counters of the queue's name only, while its jobs ran on its
    shards: 0 processed for a queue that processed 6."""
    from conveyor.monitoring import ops

    app.task(name="ok")(lambda *args: None)
    sharded(app, 3)
    for i in range(6):
        app.enqueue("ok", (i,), queue="events")
    app.enqueue("ok", queue="mail")
    app.worker(queues=["events", "mail"]).run_until_idle()
    inspector = Operator(app, "test").inspector
    data = ops.history(inspector, "1h", "events")
    assert (data["queue"], data["processed"], data["failed"]) == ("events", 6, 0)
    assert ops.history(inspector, "1h")["processed"] == 7
    assert ops.history(inspector, "7d", "mail")["processed"] == 1
