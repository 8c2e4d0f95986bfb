"""Wake-ups of multi-queue workers on a real 3-master Redis Cluster (issue 18).

In Cluster mode a worker of several queues (every sharded queue is several) blocks on one
global wake-up list, because a BLPOP cannot span hash slots. Each enqueue used to push that
list itself: a second round trip on the caller's path, always to the same master. Now the
push leaves the caller's path (a background waker, coalesced: pushes asked for while one is on
its way go out as one), and no wake-up is lost: a worker waiting on the sharded queue picks up
a trickle of jobs at once, with one claim round per job (issue 18 item 1).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import redis
from conveyor import Conveyor
from conveyor.broker.redis import RedisBroker
from conveyor.config import Settings
from tests.redis.shard_trickle import trickle
from tests.worker.conftest import running, wait_until


@pytest.fixture
def cluster_broker(redis_cluster: Any) -> Iterator[RedisBroker]:
    broker = RedisBroker.from_url(redis_cluster.url)
    broker.flush_all()
    yield broker
    broker.close()


def _lpush_calls(cluster: Any) -> int:
    """LPUSH commands served so far by all nodes (INFO commandstats)."""
    total = 0
    for node in cluster.nodes:
        client = redis.Redis(port=node.port)
        try:
            total += int(client.info("commandstats").get("cmdstat_lpush", {}).get("calls", 0))
        finally:
            client.close()
    return total


def test_an_enqueue_sends_only_its_script_on_the_callers_thread(
    cluster_broker: RedisBroker,
) -> None:
    app = Conveyor(cluster_broker, rng=random.Random(2))
    app.queue("events", shards=3)
    for _ in range(3):  # connect, load the script, register the shards (one per call)
        app.enqueue("t", queue="events")
    client = cluster_broker.client
    caller = threading.get_ident()
    on_caller: list[str] = []
    real_pipeline, real_execute = client.pipeline, client.execute_command

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == caller:
            on_caller.append("pipeline")
        return real_pipeline(*args, **kwargs)

    def execute_command(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == caller:
            on_caller.append(str(args[0]))
        return real_execute(*args, **kwargs)

    client.pipeline, client.execute_command = pipeline, execute_command
    try:
        for i in range(5):
            app.enqueue("t", args=[i], queue="events")
    finally:
        client.pipeline, client.execute_command = real_pipeline, real_execute
    # before: EVALSHA, then a pipeline (LPUSH + LTRIM of the global list) for each job
    assert on_caller == ["EVALSHA"] * 5, on_caller


def test_global_wake_pushes_of_concurrent_producers_coalesce(
    cluster_broker: RedisBroker, redis_cluster: Any
) -> None:
    app = Conveyor(cluster_broker, rng=random.Random(3))
    app.queue("events", shards=3)
    for _ in range(3):
        app.enqueue("t", queue="events")
    before = _lpush_calls(redis_cluster)
    threads, per_thread = 8, 50
    start = threading.Barrier(threads)

    def produce() -> None:
        start.wait()
        for i in range(per_thread):
            app.enqueue("t", args=[i], queue="events")

    pool = [threading.Thread(target=produce) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    jobs = threads * per_thread
    # commandstats also counts the scripts' pushes to the shards' own wake lists: at most
    # WAKE_MAX (16) each, as no worker empties them here; the rest went to the global list
    in_scripts = 16 * 3
    wait_until(lambda: _lpush_calls(redis_cluster) > before + in_scripts, timeout=10)
    pushes = _lpush_calls(redis_cluster) - before - in_scripts
    assert 0 < pushes < jobs * 0.75, f"{pushes} global pushes for {jobs} jobs"


def test_a_sharded_queue_worker_picks_up_a_trickle_on_each_wake_up(
    cluster_broker: RedisBroker,
) -> None:
    settings = Settings(poll_interval=5.0, reap_interval=2.0, shutdown_timeout=5.0)  # type: ignore[call-arg]
    app = Conveyor(cluster_broker, settings=settings, rng=random.Random(4))
    app.queue("events", shards=3)
    done: list[int] = []

    @app.task(queue="events", name="wake.note")
    def note(i: int) -> None:
        done.append(i)

    rounds: list[int] = []
    real_claim = cluster_broker.claim

    def counting_claim(*args: Any, **kwargs: Any) -> Any:
        got = real_claim(*args, **kwargs)
        rounds.append(len(got))
        return got

    cluster_broker.claim = counting_claim  # type: ignore[method-assign]
    with running(app, queues="events", concurrency=4):
        wait_until(lambda: rounds, timeout=20)
        first = len(rounds)
        began = time.monotonic()
        for i in range(10):
            note.enqueue(i)
            wait_until(lambda i=i: len(done) > i, timeout=20)  # type: ignore[misc]
        took = time.monotonic() - began
        claims = len(rounds) - first
    assert sorted(done) == list(range(10))
    assert took < 5.0, f"woken by each enqueue, not by the 5 s poll ({took:.2f}s for 10 jobs)"
    assert claims <= 10 + 3, (claims, rounds[first:])


def test_a_claim_round_skips_shards_left_empty(
    cluster_broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a wake-up, one script call claims the job: the shards (and the logical name) an
    earlier claim left empty are read in one pipeline of LLENs and skipped. A delayed job in a
    skipped shard still starts on time (the skipped shards' ``next_due`` is reported)."""
    claims, late = trickle(cluster_broker, 3, monkeypatch)
    # before: each wake-up read all 4 queues (3 shards and the logical name): 40 calls
    assert claims <= 10 + 2, claims
    assert -0.05 < late < 0.5, f"the delayed job started {late:.3f}s after its due time"
