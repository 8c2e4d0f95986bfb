"""Issue 19 items 2 and 3 on a real 3-node Redis Cluster: ``wait`` (XREAD of the queue's
stream through the cluster client) and the async producer API (no native cluster client: the
synchronous calls on a worker thread) work, without blocking the event loop."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker.redis import RedisBroker
from conveyor.config import Settings
from tests.typed.test_async import MAX_GAP, _measured
from tests.worker.conftest import FAST, running


@pytest.fixture
def cluster_app(redis_cluster: Any) -> Iterator[Conveyor]:
    broker = RedisBroker.from_url(redis_cluster.url)
    broker.flush_all()
    app = Conveyor(broker, settings=Settings(**FAST), rng=random.Random(1))  # type: ignore[arg-type]
    yield app
    app.close()


def test_wait_and_async_producers_on_a_cluster(cluster_app: Conveyor) -> None:
    @cluster_app.task(queue="emails")
    def greet(name: str) -> str:
        return f"hi {name}"

    async def work() -> list[str]:
        one = await greet.enqueue_async("a")
        more = await cluster_app.enqueue_many_async([greet.s("b"), greet.s("c")])
        return [await h.wait_async(timeout=30) for h in (one, *more)]

    with running(cluster_app, concurrency=2):
        assert greet.enqueue("z").wait(timeout=30) == "hi z"
        results, gap = asyncio.run(_measured(work()))
    assert results == ["hi a", "hi b", "hi c"]
    assert gap < MAX_GAP
    assert cluster_app.broker.aclients.by_loop == {}  # type: ignore[attr-defined]
