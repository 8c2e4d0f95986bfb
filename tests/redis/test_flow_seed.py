"""Run-time limit overrides reach Redis queues registered after they were set (flowadmin.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from conveyor import Conveyor, FakeClock
from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.flowadmin import global_overrides

T0 = 1_700_000_000.0


def test_an_older_override_write_never_undoes_a_newer_one(rbroker: RedisBroker) -> None:
    """The copy into a new queue and the operator's own write may land in either order."""
    rbroker.register(["q"])
    keys = rbroker.qkeys("q")
    limits = rbroker.keys.flow("q", "limits")
    rbroker.runner.run("flow_limit", keys, ["conc:t", "", 7])  # cleared at version 7
    assert rbroker.runner.run("flow_limit", keys, ["conc:t", "[1.0]", 5]) == -1  # a stale copy
    assert rbroker.client.hget(limits, "conc:t") is None
    rbroker.runner.run("flow_limit", keys, ["conc:t", "[2.0]", 8])
    assert orjson.loads(rbroker.client.hget(limits, "conc:t")) == [2.0]


def test_a_queue_first_used_by_an_async_enqueue_gets_the_overrides(redis_server: Any) -> None:
    broker = RedisBroker.from_url(redis_server.url)
    broker.flush_all()
    clock = FakeClock(T0)
    app = Conveyor(broker, clock=clock)

    app.set_limit("conc:flow.fresh", 1)
    producer = Conveyor(RedisBroker.from_url(redis_server.url), clock=clock)  # another process

    @producer.task(name="flow.fresh", queue="fresh_async", concurrency=3)
    def fresh(n: int) -> None: ...

    async def main() -> None:
        for n in range(3):
            await fresh.enqueue_async(n)

    asyncio.run(main())
    assert len(broker.claim(["fresh_async"], clock.now(), limit=10)) == 1
    producer.close()
    app.close()


def _old_layout(broker: RedisBroker, overrides: dict[str, dict[str, str]]) -> None:
    """Write the previous version's state by hand: registered queues whose ``f:limits`` hash
    holds run-time overrides (no ``f:limitv``, no global ``<p>:flow:limits``)."""
    client = broker.client
    client.sadd(broker.keys.queues, *overrides)
    for queue, limits in overrides.items():
        if limits:
            client.hset(broker.keys.flow(queue, "limits"), mapping=limits)


def test_overrides_of_the_previous_version_reach_a_queue_created_after_the_upgrade(
    redis_server: Any,
) -> None:
    broker = RedisBroker.from_url(redis_server.url)
    broker.flush_all()
    _old_layout(broker, {"old_a": {"conc:flow.up": "[1.0]"}, "old_b": {"conc:flow.up": "[1.0]"}})
    clock = FakeClock(T0)
    app = Conveyor(broker, clock=clock)  # a process of the new version starts

    @app.task(name="flow.up", queue="new_q", concurrency=3)
    def up(n: int) -> None: ...

    for n in range(3):
        up.enqueue(n)
    assert len(broker.claim(["new_q"], clock.now(), limit=10)) == 1  # the old override holds
    assert app.limits()["limits"]["conc:flow.up"] == [1.0]
    app.close()


def test_the_upgrade_seed_is_deterministic_idempotent_and_never_beats_a_newer_override(
    rbroker: RedisBroker,
) -> None:
    _old_layout(
        rbroker,
        {
            "a": {"conc:x": "[1.0]", "rate:y": "[5.0, 1.0, 5.0]", "conc:z": "[3.0]"},
            "b": {"conc:x": "[2.0]", "conc:z": "[4.0]"},
            "c": {"conc:x": "[2.0]"},
            "d": {"conc:bad": "not json", "conc:worse": '["a"]'},  # left alone
        },
    )
    rbroker.client.set(rbroker.keys.flow_seq, 5)  # an operator of the new version, first
    rbroker.client.hset(rbroker.keys.flow_overrides, "rate:y", orjson.dumps([5, [9.0, 1.0, 9.0]]))
    rbroker.register(["e"])
    held = global_overrides(rbroker.client, rbroker.keys)
    assert held == {
        "conc:x": (0, [2.0]),  # the value most queues hold
        "conc:z": (0, [3.0]),  # a tie: the first queue by name
        "rate:y": (5, [9.0, 1.0, 9.0]),  # the newer override stays
    }
    for queue in "abcde":  # every queue now holds the adopted overrides (one value each)
        got = rbroker.client.hmget(rbroker.keys.flow(queue, "limits"), ["conc:x", "conc:z"])
        assert [orjson.loads(v) for v in got] == [[2.0], [3.0]]
    rbroker.client.delete(rbroker.keys.flow_adopted)  # a second run (another process)
    rbroker._conn.registered.clear()
    rbroker.register(["e"])
    assert global_overrides(rbroker.client, rbroker.keys) == held


def test_the_upgrade_seed_on_a_cluster(redis_cluster: Any) -> None:
    """The per-queue hashes live in as many hash slots as there are queues."""
    broker = RedisBroker.from_url(redis_cluster.url)
    broker.flush_all()
    _old_layout(broker, {f"old{i}": {"conc:c": "[2.0]"} for i in range(6)})
    broker.register(["new"])
    assert global_overrides(broker.client, broker.keys) == {"conc:c": (0, [2.0])}
    assert orjson.loads(broker.client.hget(broker.keys.flow("new", "limits"), "conc:c")) == [2.0]
    broker.close()
