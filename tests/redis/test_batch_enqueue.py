"""Opt-in auto-batching of one-job enqueues (``?batch_enqueue=<ms>``, issue 18; coalesce.py).

Many threads enqueue one job each: they share script calls, and each caller is still told its
own job id, its own duplicate / idempotency outcome or its own error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker.redis import RedisBroker
from conveyor.core.job import Job
from conveyor.errors import BrokerUnavailable, DuplicateJob, ValidationError

T = 1_700_000_000.0
THREADS = 40


@pytest.fixture
def batching(redis_server: Any) -> Iterator[RedisBroker]:
    """A broker whose one-job enqueues wait up to 50 ms for company (generous: CI is slow)."""
    broker = RedisBroker.from_url(redis_server.url + "?batch_enqueue=50&batch_enqueue_max=1000")
    broker.flush_all()
    yield broker
    broker.close()


def _job(job_id: str, **kw: Any) -> Job:
    return Job(id=job_id, task="t", queue=kw.pop("queue", "default"), created_at=T, run_at=T, **kw)


def _together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` on threads released at once; each slot holds a result or an exception."""
    out: list[Any] = [None] * len(calls)
    gate = threading.Barrier(len(calls))

    def run(i: int) -> None:
        gate.wait()
        try:
            out[i] = calls[i]()
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def _script_calls(broker: RedisBroker) -> int:
    stats = broker.client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_one_job_enqueues_of_many_threads_share_script_calls(batching: RedisBroker) -> None:
    batching.client.config_resetstat()
    calls = [lambda i=i: batching.enqueue([_job(f"j{i}")], T) for i in range(THREADS)]
    results = _together(calls)
    assert [r[0].id for r in results] == [f"j{i}" for i in range(THREADS)]
    assert not any(r[0].duplicate for r in results)
    assert _script_calls(batching) <= THREADS // 4  # 40 jobs, a handful of script calls
    assert batching.counts()["default"]["pending"] == THREADS
    assert {j.id for j in batching.peek("default", 100)} == {f"j{i}" for i in range(THREADS)}


def test_each_caller_gets_its_own_duplicate_error(batching: RedisBroker) -> None:
    batching.enqueue([_job("taken")], T)
    calls = [lambda i=i: batching.enqueue([_job(f"j{i}")], T) for i in range(10)]
    calls += [lambda: batching.enqueue([_job("taken")], T)]
    calls += [lambda: batching.enqueue([_job("twice")], T) for _ in range(3)]
    results = _together(calls)
    assert [r[0].id for r in results[:10]] == [f"j{i}" for i in range(10)]
    assert isinstance(results[10], DuplicateJob) and results[10].job_id == "taken"
    twice = results[11:]
    assert sum(isinstance(r, DuplicateJob) for r in twice) == 2  # one of the three is stored
    assert [r[0].id for r in twice if isinstance(r, list)] == ["twice"]
    assert batching.counts()["default"]["pending"] == 1 + 10 + 1


def test_a_shared_idempotency_key_stores_one_job(batching: RedisBroker) -> None:
    calls = [
        lambda i=i: batching.enqueue([_job(f"k{i}", idempotency_key="same")], T) for i in range(8)
    ]
    results = [r[0] for r in _together(calls)]
    stored = [r for r in results if not r.duplicate]
    assert len(stored) == 1
    assert all(r.duplicate and r.id == stored[0].id for r in results if r is not stored[0])
    assert batching.counts()["default"]["pending"] == 1


def test_jobs_of_several_queues_in_one_window(batching: RedisBroker) -> None:
    calls = [lambda i=i: batching.enqueue([_job(f"q{i}", queue=f"q{i % 3}")], T) for i in range(9)]
    assert all(isinstance(r, list) for r in _together(calls))
    counts = batching.counts()
    assert [counts[f"q{n}"]["pending"] for n in range(3)] == [3, 3, 3]


def test_a_lone_enqueue_waits_at_most_the_linger(batching: RedisBroker) -> None:
    import time

    began = time.monotonic()
    [result] = batching.enqueue([_job("alone")], T)
    assert result.id == "alone" and time.monotonic() - began < 5.0  # linger 50 ms + slack
    assert batching.get("alone") is not None


def test_an_app_with_batch_enqueue_runs_its_jobs(redis_server: Any) -> None:
    app = Conveyor(redis_server.url + "?batch_enqueue=5")
    app.broker.flush_all()
    done: list[int] = []

    @app.task
    def add(n: int) -> None:
        done.append(n)

    handles = _together([lambda i=i: add.enqueue(i) for i in range(20)])
    assert len({h.id for h in handles}) == 20
    app.worker(["default"], concurrency=4, handle_signals=False, max_jobs=20).run()
    assert sorted(done) == list(range(20))
    app.close()


@pytest.mark.parametrize(
    "query",
    [
        "batch_enqueue=0",
        "batch_enqueue=abc",
        "batch_enqueue=5&batch_enqueue_max=1",
        "batch_enqueue_max=10",
    ],
)
def test_bad_batch_options_are_refused(redis_server: Any, query: str) -> None:
    with pytest.raises(ValidationError, match="batch_enqueue"):
        RedisBroker.from_url(redis_server.url + "?" + query)


def test_an_outage_is_raised_to_every_caller_of_the_batch() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    broker = RedisBroker.from_url(f"redis://127.0.0.1:{port}/0?batch_enqueue=50")
    try:
        results = _together([lambda i=i: broker.enqueue([_job(f"o{i}")], T) for i in range(5)])
        assert all(isinstance(r, BrokerUnavailable) for r in results), results
    finally:
        broker.close()
