"""Run-time limit overrides reach Redis queues registered after they were set (flowadmin.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from conveyor import Conveyor, FakeClock
from conveyor.broker.redis import RedisBroker

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
