"""Redis down and back: prompt BrokerUnavailable, recovery, and no acknowledged job lost on AOF."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import BrokerUnavailable, Conveyor, FakeClock, JobState
from conveyor.broker.base import Ack
from conveyor.broker.redis import RedisBroker
from conveyor.core.ids import new_ulid
from conveyor.core.job import Job
from tests.support.redis_proc import free_port

from .conftest import T0


def test_producer_gets_broker_unavailable_promptly_when_nothing_listens() -> None:
    app = Conveyor(f"redis://127.0.0.1:{free_port()}/0", clock=FakeClock(T0))
    began = time.monotonic()
    with pytest.raises(BrokerUnavailable):
        app.enqueue("t", args=[1])
    assert time.monotonic() - began < 2.0
    app.close()


def test_broker_fails_fast_while_down_and_recovers_when_back(
    make_server: Callable[..., Any],
) -> None:
    server = make_server()
    clock = FakeClock(T0)
    app = Conveyor(server.url, clock=clock)
    first = app.enqueue("t", args=[1])
    server.stop()
    for call in (
        lambda: app.enqueue("t", args=[2]),
        lambda: app.get_job(first.id),
        lambda: app.broker.claim(["default"], T0),
        app.stats,
    ):
        began = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            call()
        assert time.monotonic() - began < 2.0
    server.start()  # same port, empty data (no persistence), empty script cache
    again = app.enqueue("t", args=[3])
    leases = app.broker.claim(["default"], clock.now(), limit=5)
    assert [lease.id for lease in leases] == [again.id]
    assert app.broker.complete([Ack(leases[0].id, leases[0].token)], clock.now()) == [True]
    app.close()


def test_aof_always_kill_minus_nine_loses_no_acknowledged_job(
    make_server: Callable[..., Any],
) -> None:
    server = make_server(aof=True)
    broker = RedisBroker.from_url(server.url)
    rng = random.Random(9)
    ids = [new_ulid(T0, rng) for _ in range(300)]
    for start in range(0, 300, 50):  # every enqueue that returned is acknowledged
        broker.enqueue(
            [Job(id=i, task="t", run_at=T0, created_at=T0) for i in ids[start : start + 50]], T0
        )
    completed_before: set[str] = set()
    for _ in range(10):
        leases = broker.claim(["default"], T0, limit=10, visibility_timeout=30)
        assert all(broker.complete([Ack(x.id, x.token) for x in leases], T0))
        completed_before.update(x.id for x in leases)
    in_flight = broker.claim(["default"], T0, limit=20, visibility_timeout=30)  # never acked
    server.kill()  # SIGKILL: a crash
    server.start()
    now = T0 + 31  # the crashed worker's leases have expired
    assert broker.reap_expired(now) == len(in_flight)
    done = set(completed_before)
    while leases := broker.claim(["default"], now, limit=50):
        assert all(broker.complete([Ack(x.id, x.token) for x in leases], now))
        done.update(x.id for x in leases)
        assert not completed_before & {x.id for x in leases}, "an acknowledged job ran again"
    assert done == set(ids)
    assert broker.counts()["default"][str(JobState.COMPLETED)] == 300
    assert all(broker.get(i).state is JobState.COMPLETED for i in ids)  # type: ignore[union-attr]
    broker.close()


def test_running_worker_survives_an_outage_and_resumes(
    make_server: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server()
    app = Conveyor(server.url)
    done: list[int] = []

    @app.task
    def note(i: int) -> None:
        done.append(i)

    worker = app.worker(queues=["default"], concurrency=2)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    app.enqueue("note", args=[1])
    _until(lambda: done == [1], "the first job ran")
    with caplog.at_level(logging.WARNING):
        server.stop()
        _until(
            lambda: any(
                r.levelno >= logging.WARNING and r.name.startswith("conveyor.worker")
                for r in caplog.records
            ),
            "the worker noticed the outage",
        )
    server.start()
    app.enqueue("note", args=[2])
    _until(lambda: done == [1, 2], "the worker resumed after Redis came back", timeout=20)
    assert runner.is_alive()
    worker.stop(timeout=5)
    runner.join(10)
    app.close()


def _until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
