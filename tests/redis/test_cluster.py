"""A real 3-node Redis Cluster: queues in different slots enqueued, run, retried, dead-lettered."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Backoff, Conveyor, FakeClock, JobState, PermanentError, ValidationError
from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.keys import key_slot
from conveyor.task import JobSpec

from .conftest import T0

QUEUES = ["emails", "reports", "billing", "default"]


@pytest.fixture
def cluster_app(redis_cluster: Any) -> Iterator[Conveyor]:
    broker = RedisBroker.from_url(redis_cluster.url)
    broker.flush_all()
    app = Conveyor(broker, clock=FakeClock(T0), rng=random.Random(1))
    yield app
    app.close()


def _node_of(cluster: Any, key: str) -> int:
    import redis

    slots = redis.Redis(port=cluster.nodes[0].port).cluster("SLOTS")
    slot = key_slot(key)
    for start, end, primary, *_ in slots:
        if start <= slot <= end:
            return int(primary[1])
    raise AssertionError(slot)


def test_queues_live_on_different_nodes(redis_cluster: Any) -> None:
    ports = {_node_of(redis_cluster, f"conveyor:{{{q}}}:ready") for q in QUEUES}
    assert len(ports) >= 2, "the test queues should spread over several nodes"


def test_enqueue_run_retry_and_dead_letter_on_a_cluster(cluster_app: Conveyor) -> None:
    app, clock = cluster_app, cluster_app.clock
    assert isinstance(clock, FakeClock)
    calls: dict[str, int] = {}

    @app.task(max_attempts=3, backoff=Backoff.fixed(10))
    def flaky(queue: str) -> str:
        calls[queue] = calls.get(queue, 0) + 1
        if calls[queue] < 2:
            raise ValueError("first run fails")
        return f"ok {queue}"

    @app.task(max_attempts=5)
    def doomed(queue: str) -> None:
        raise PermanentError(f"never in {queue}")

    good = {q: flaky.options(queue=q).enqueue(q) for q in QUEUES}
    bad = {q: doomed.options(queue=q).enqueue(q) for q in QUEUES}
    worker = app.worker(queues=QUEUES)
    assert worker.run_until_idle() == 2 * len(QUEUES)
    for q in QUEUES:
        assert good[q].refresh().state is JobState.RETRY_SCHEDULED
        assert bad[q].refresh().state is JobState.DEAD_LETTER
        assert bad[q].errors[-1]["kind"] == "permanent"
    clock.advance(10)
    assert worker.run_until_idle() == len(QUEUES)
    for q in QUEUES:
        job = good[q].refresh()
        assert (job.state, job.result, job.attempts) == (JobState.COMPLETED, f"ok {q}", 2)
    stats = app.stats()["queues"]
    assert all(stats[q]["completed"] == 1 and stats[q]["dead_letter"] == 1 for q in QUEUES)
    assert {j.id for j in app.dead_letters()} == {j.id for j in bad.values()}
    assert app.requeue_dead(bad["billing"].id)
    assert app.get_job(bad["billing"].id).state is JobState.PENDING
    assert app.purge_dead() == len(QUEUES) - 1
    events, _ = app.broker.events_read(None, 1000)
    assert {e["queue"] for e in events} == set(QUEUES)


def test_cross_queue_batch_is_refused_in_cluster_mode(cluster_app: Conveyor) -> None:
    specs = [JobSpec("t", (), {}, {"queue": "emails"}), JobSpec("t", (), {}, {"queue": "billing"})]
    with pytest.raises(ValidationError, match="jobs"):
        cluster_app.enqueue_many(specs)
    assert cluster_app.search().total == 0
    same = cluster_app.enqueue_many([JobSpec("t", (i,), {}, {"queue": "emails"}) for i in range(3)])
    assert len(same) == 3


def test_idle_worker_wakes_on_enqueue_in_cluster_mode(cluster_app: Conveyor) -> None:
    broker = cluster_app.broker
    client: Any = broker.client  # type: ignore[attr-defined]
    for queues in (["emails"], ["emails", "billing"]):
        # The previous enqueue's global marker goes out on the waker's thread (waker.py): let
        # it land first, or (on a loaded machine) it lands after the deletes below and the
        # waiter pops it instead of blocking ("the waiter never blocked").
        broker._waker.close()  # type: ignore[attr-defined]
        for key in ("conveyor:wake", "conveyor:{emails}:wake", "conveyor:{billing}:wake"):
            client.delete(key)  # no stale markers: the waiter must really block
        woke: list[float] = []

        def wait(qs: list[str] = queues, out: list[float] = woke) -> None:
            broker.wait_for_work(qs, 20.0)
            out.append(time.monotonic())

        waiter = threading.Thread(target=wait)
        waiter.start()
        _wait_until_blocked(cluster_app)
        sent = time.monotonic()
        cluster_app.enqueue("t", queue=queues[-1])
        waiter.join(25)
        # woken by the enqueue, not by the end of its 20 s wait (generous under load)
        assert woke and woke[0] - sent < 5.0, queues


def _wait_until_blocked(app: Conveyor) -> None:
    """Poll (with a deadline) until some client is blocked in BLPOP on the cluster."""
    client: Any = app.broker.client  # type: ignore[attr-defined]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        infos = client.info("clients", target_nodes=client.PRIMARIES)
        if any(int(i.get("blocked_clients", 0)) > 0 for i in infos.values()):
            return
        time.sleep(0.01)
    raise AssertionError("the waiter never blocked")


def test_plain_redis_url_autodetects_cluster_mode(redis_cluster: Any) -> None:
    broker = RedisBroker.from_url(redis_cluster.plain_url)
    assert broker.cluster
    broker.flush_all()
    broker.close()


def test_noscript_recovery_on_every_node(cluster_app: Conveyor) -> None:
    import redis

    for q in QUEUES:
        cluster_app.enqueue("t", queue=q)
    for node in cluster_app.broker.client.get_primaries():  # type: ignore[attr-defined]
        redis.Redis(port=node.port).script_flush()
    leases = cluster_app.broker.claim(QUEUES, cluster_app.now(), limit=10)
    assert sorted(lease.job.queue for lease in leases) == sorted(QUEUES)
    for node in cluster_app.broker.client.get_primaries():  # type: ignore[attr-defined]
        redis.Redis(port=node.port).script_flush()
    from conveyor.broker.base import Ack

    acks = [Ack(lease.id, lease.token) for lease in leases]
    assert cluster_app.broker.complete(acks, cluster_app.now()) == [True] * len(QUEUES)
