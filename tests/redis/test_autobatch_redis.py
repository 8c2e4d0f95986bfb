"""The auto-batching producer (issue 18) on a real redis-server: load, outage, fork, Cluster.

50 threads x 200 one-job calls: every caller is told a distinct id, all 10,000 jobs are
stored, and batches really formed (broker calls counted by wrapping the real broker, and the
server's own EVALSHA count from INFO commandstats). An outage error reaches every caller of
its batch; a forked child (gunicorn preloading the app) gets a fresh batcher.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import AutoBatch, Conveyor, FakeClock
from conveyor.autobatch import AutoBatcher
from conveyor.broker.redis import RedisBroker
from conveyor.errors import BrokerUnavailable
from conveyor.task import JobSpec
from tests.redis.conftest import T0
from tests.support import redis_proc
from tests.support.autobatch_load import hammer, record_enqueue_sizes

DEADLINE = 30.0


def _frozen(app: Conveyor, n: int) -> AutoBatcher:
    """Auto-batching that writes exactly when ``n`` callers wait (the timer never moves)."""
    batcher = AutoBatcher(app.runtime, AutoBatch(max_jobs=n, max_delay=1.0), timer=lambda: 0.0)
    app.runtime.producer.autobatch = batcher
    return batcher


def _evalsha_calls(broker: RedisBroker) -> int:
    stats = broker.client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def _threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call on its own thread; return each one's result or exception."""
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:
            out[i] = exc

    pool = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for t in pool:
        t.start()
    for t in pool:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in pool), "a caller is still blocked"
    return out


def test_fifty_threads_of_single_enqueues_share_broker_calls(rbroker: RedisBroker) -> None:
    app = Conveyor(rbroker, autobatch=AutoBatch(max_jobs=100, max_delay=0.001))
    sizes = record_enqueue_sizes(rbroker)
    rbroker.client.config_resetstat()
    ids = hammer(app, threads=50, per_thread=200)
    evalsha = _evalsha_calls(rbroker)
    flat = [i for per in ids for i in per]
    assert len(flat) == 10_000 and len(set(flat)) == 10_000, "every caller got its own id"
    assert sum(rbroker.counts()["default"].values()) == 10_000
    assert sum(sizes) == 10_000 and max(sizes) <= 100
    # one call per job would be 10,000; concurrent callers share calls
    assert len(sizes) <= 2_500, f"{len(sizes)} broker calls for 10,000 jobs"
    assert evalsha <= len(sizes) + 10, "the server saw one script call per batch"
    # each thread's jobs are claimed in the order that thread enqueued them
    order = {job.id: tuple(job.args) for job in rbroker.peek("default", 10_000)}
    for k, per in enumerate(ids):
        assert [order[i] for i in per] == [(k, i) for i in range(200)]
    app.close()


def test_outage_error_reaches_every_caller_of_the_batch(make_server: Any) -> None:
    server = make_server()
    app = Conveyor(RedisBroker.from_url(server.url), clock=FakeClock(T0))
    app.enqueue("t")  # connected
    batcher = _frozen(app, 4)
    sizes = record_enqueue_sizes(app.broker)
    server.stop()
    out = _threads([lambda n=n: app.enqueue("t", args=[n]) for n in range(4)])
    assert all(isinstance(r, BrokerUnavailable) for r in out), out
    assert sizes == [4], "no per-job retries during an outage"
    server.start()
    deadline = time.monotonic() + DEADLINE
    while True:  # the pool reconnects; the same batcher serves the next batch
        out = _threads([lambda n=n: app.enqueue("t", args=[n]) for n in range(4)])
        if not any(isinstance(r, Exception) for r in out) or time.monotonic() > deadline:
            break
    assert [h.args for h in out] == [[0], [1], [2], [3]]
    assert batcher.jobs == 4
    app.close()


def test_a_forked_child_gets_a_fresh_batcher(rbroker: RedisBroker) -> None:
    app = Conveyor(rbroker, clock=FakeClock(T0), autobatch=AutoBatch(max_jobs=10))
    app.enqueue("t", args=["parent"])  # the parent's writer thread is running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        status = 1
        try:
            done: list[str] = []
            t = threading.Thread(target=lambda: done.append(app.enqueue("t", args=["child"]).id))
            t.start()
            t.join(10)
            if done:
                os.write(write, done[0].encode())
                status = 0
        finally:
            os._exit(status)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child_id = os.read(read, 100).decode()
    os.close(read)
    assert status == 0, "the child's enqueue hung on the parent's (absent) writer"
    assert app.get_job(child_id).args == ["child"]
    assert app.enqueue("t", args=["parent again"]).args == ["parent again"]
    app.close()


def test_cluster_batches_are_written_per_queue(redis_cluster: Any) -> None:
    if not redis_proc.available():
        pytest.skip("redis-server is not installed")
    broker = RedisBroker.from_url(redis_cluster.url)
    broker.flush_all()
    app = Conveyor(broker, clock=FakeClock(T0), rng=random.Random(1))
    sizes = record_enqueue_sizes(broker)
    _frozen(app, 4)
    queues = ["emails", "reports", "emails", "billing"]
    out = _threads([lambda q=q: app.enqueue("t", queue=q) for q in queues])
    assert [h.queue for h in out] == queues
    assert sorted(sizes) == [1, 1, 2], "one script call per queue (slot), none refused"
    counts = broker.counts()
    assert sum(sum(counts[q].values()) for q in set(queues)) == 4
    two = [JobSpec("t", (), {}, {"queue": "emails"})] * 2
    assert len(app.enqueue_many(two)) == 2 and sizes[-1] == 2  # a multi-job call: direct
    app.close()
