"""The trickle a sharded-queue worker sees (issue 18, broker/redis/idlequeues.py), shared by the
single-Redis and the Cluster tests: after a first full claim round, ten one-job wake-ups, then a
delayed job whose shard a later wake-up's claim skips. Returns the claim scripts the ten
wake-ups cost and how late the delayed job started."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker.redis import RedisBroker, idlequeues
from conveyor.config import Settings
from tests.worker.conftest import running, wait_until


def trickle(broker: RedisBroker, shards: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, float]:
    """(claim scripts for ten one-job wake-ups, lateness of the delayed job in seconds)."""
    monkeypatch.setattr(idlequeues, "FRESH_S", 60.0)  # no refresh round during the test
    settings = Settings(poll_interval=5.0, reap_interval=2.0, shutdown_timeout=5.0)  # type: ignore[call-arg]
    app = Conveyor(broker, settings=settings, rng=random.Random(6))
    app.queue("events", shards=shards)
    starts: dict[int, float] = {}

    @app.task(queue="events", name="wake.mark")
    def mark(i: int) -> None:
        starts[i] = time.monotonic()

    runner = broker.runner
    scripts: list[str] = []
    real_run = runner.run

    def counting_run(name: str, *args: Any, **kwargs: Any) -> Any:
        scripts.append(name)
        return real_run(name, *args, **kwargs)

    runner.run = counting_run  # type: ignore[method-assign]
    with running(app, queues="events", concurrency=4):
        # the first, full round: every shard and the logical name
        wait_until(lambda: scripts.count("claim") >= shards + 1, timeout=20)
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
    return claims, starts[100] - (began + 0.8)
