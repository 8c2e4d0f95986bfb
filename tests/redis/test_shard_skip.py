"""A worker of a sharded queue on a single (non-Cluster) Redis skips the shards its last claims
left empty (broker/redis/idlequeues.py, issue 18): a trickle costs about one claim script per
job, not one per shard. The wait pops the woken queue's own marker, so it tells the skip list
which queue that was (that queue is read, whatever its wake list now holds)."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker.redis import RedisBroker
from conveyor.config import Settings
from tests.worker.conftest import running, wait_until


def test_a_claim_round_on_a_single_redis_skips_shards_left_empty(
    rbroker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.broker.redis import idlequeues

    monkeypatch.setattr(idlequeues, "FRESH_S", 60.0)  # no refresh round during the test
    settings = Settings(poll_interval=5.0, reap_interval=2.0, shutdown_timeout=5.0)  # type: ignore[call-arg]
    app = Conveyor(rbroker, settings=settings, rng=random.Random(6))
    app.queue("events", shards=4)
    starts: dict[int, float] = {}

    @app.task(queue="events", name="wake.mark")
    def mark(i: int) -> None:
        starts[i] = time.monotonic()

    runner = rbroker.runner
    scripts: list[str] = []
    real_run = runner.run

    def counting_run(name: str, *args: Any, **kwargs: Any) -> Any:
        scripts.append(name)
        return real_run(name, *args, **kwargs)

    runner.run = counting_run  # type: ignore[method-assign]
    with running(app, queues="events", concurrency=4):
        wait_until(lambda: scripts.count("claim") >= 5, timeout=20)  # the first, full round
        time.sleep(0.2)
        first = scripts.count("claim")
        for i in range(10):
            mark.enqueue(i)
            wait_until(lambda i=i: i in starts, timeout=20)  # type: ignore[misc]
        claims = scripts.count("claim") - first
        began = time.monotonic()
        mark.enqueue_in(0.8, 100)  # its shard: claimed (a marker), then known empty till due
        time.sleep(0.2)
        mark.enqueue(101)  # this wake-up's claim skips the delayed job's shard
        wait_until(lambda: 100 in starts and 101 in starts, timeout=20)
    # before: each wake-up read all 5 queues (4 shards and the logical name): 50 calls
    assert claims <= 10 + 2, claims
    late = starts[100] - (began + 0.8)
    assert -0.05 < late < 0.5, f"the delayed job started {late:.3f}s after its due time"
