"""Sharded queues on a real 3-master Redis Cluster (issue 18 item 3).

One hot logical queue is spread over every master: its shards' keys live on all three nodes
(read back from each node with KEYS, not computed), and draining it runs claim scripts on all
three (each node's own INFO commandstats). A batch stays in one shard, so bulk enqueue keeps
working in Cluster, where a script must stay in one hash slot.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

import redis
from conveyor import Conveyor, FakeClock
from conveyor.broker.redis import RedisBroker
from conveyor.task import JobSpec

from .conftest import T0


@pytest.fixture
def cluster_app(redis_cluster: Any) -> Iterator[Conveyor]:
    broker = RedisBroker.from_url(redis_cluster.url)
    broker.flush_all()
    app = Conveyor(broker, clock=FakeClock(T0), rng=random.Random(1))
    yield app
    app.close()


def _node_keys(cluster: Any, pattern: str) -> dict[int, list[str]]:
    """Keys matching ``pattern`` held by each node (port -> keys), asked of the node itself."""
    out = {}
    for node in cluster.nodes:
        client = redis.Redis(port=node.port)
        try:
            out[node.port] = sorted(k.decode() for k in client.keys(pattern))
        finally:
            client.close()
    return out


def _evalsha_calls(cluster: Any) -> dict[int, int]:
    """Script calls served so far by each node (INFO commandstats)."""
    out = {}
    for node in cluster.nodes:
        client = redis.Redis(port=node.port)
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        out[node.port] = sum(
            int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_fcall")
        )
    return out


@pytest.mark.parametrize("shards", [3, 8])
def test_one_hot_queue_lands_on_every_master(
    cluster_app: Conveyor, redis_cluster: Any, shards: int
) -> None:
    app = cluster_app
    app.queue("events", shards=shards)

    @app.task(queue="events")
    def hit(i: int) -> int:
        return i

    handles = [hit.enqueue(i) for i in range(6 * shards)]
    held = _node_keys(redis_cluster, "conveyor:{events.shard*}:ready")
    assert all(held.values()), f"every master holds shards of the hot queue: {held}"
    assert sum(len(k) for k in held.values()) == shards
    counts = sorted(len(k) for k in held.values())
    assert counts[-1] - counts[0] <= 1, f"shards spread evenly: {held}"

    before = _evalsha_calls(redis_cluster)
    assert app.worker().run_until_idle() == len(handles)
    after = _evalsha_calls(redis_cluster)
    grew = {port: after[port] - before[port] for port in after}
    assert all(n > 0 for n in grew.values()), f"each master ran claim scripts: {grew}"
    assert all(h.refresh().result == i for i, h in enumerate(handles))
    stats = app.stats()["queues"]["events"]
    assert stats["completed"] == len(handles) and len(stats["shards"]) == shards


def test_bulk_enqueue_and_idempotency_on_a_sharded_cluster_queue(cluster_app: Conveyor) -> None:
    app = cluster_app
    app.queue("events", shards=3)
    batches = [
        app.enqueue_many([JobSpec("t", (i,), {}, {"queue": "events"}) for i in range(100)])
        for _ in range(3)
    ]
    assert len({b[0].queue for b in batches}) == 3  # three calls, three shards (round-robin)
    first = app.enqueue("t", queue="events", idempotency_key="pay-1")
    again = [app.enqueue("t", queue="events", idempotency_key="pay-1") for _ in range(5)]
    assert all(h.duplicate and h.id == first.id for h in again)
    app.pause("events")
    assert app.stats()["queues"]["events"]["paused"] is True
    assert app.worker(queues="events").run_until_idle() == 0
    app.resume("events")

    @app.task(name="t")
    def t(i: int = 0) -> None: ...

    assert app.worker(queues="events").run_until_idle() == 301


def test_a_keyed_batch_over_several_shards_is_refused_in_cluster(cluster_app: Conveyor) -> None:
    from conveyor import ValidationError

    app = cluster_app
    app.queue("orders", shards=3, shard_by="customer")
    specs = [JobSpec("t", (), {"customer": c}, {"queue": "orders"}) for c in range(12)]
    with pytest.raises(ValidationError, match="single queue"):
        app.enqueue_many(specs)
    assert app.stats()["queues"].get("orders", {}).get("pending", 0) == 0  # nothing stored
    one = [JobSpec("t", (), {"customer": 7, "n": n}, {"queue": "orders"}) for n in range(3)]
    assert len({h.queue for h in app.enqueue_many(one)}) == 1  # one key: one shard, accepted
