"""Issue 15 on every backend, real time: a worker that cannot claim because of a limit sleeps
until the next token (the empty claim's ``next_due``) or until a slot frees (the job's end
wakes it), not a fixed poll.

The poll interval is 2 s, so a worker that only polled would start the next job seconds
late; the tests allow a small fraction of that (a loaded 2-core machine delays single
samples: medians, generous bounds).
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from typing import Any

import pytest

from conveyor import ConcurrencyLimit, Conveyor
from conveyor.broker.base import Broker
from conveyor.config import Settings

from .conftest import running, wait_until

POLL = 2.0  # a fixed poll would show as gaps of seconds (a stop also waits out the poll)


def _app(broker: Broker) -> Conveyor:
    if not getattr(broker, "supports_flow", False):
        pytest.skip(f"flow control is not implemented on {type(broker).__name__} yet")
    settings = Settings(poll_interval=POLL, reap_interval=2.0, shutdown_timeout=5.0)  # type: ignore[call-arg]
    return Conveyor(broker, settings=settings, rng=random.Random(3))


def test_a_throttled_worker_wakes_for_the_next_token(broker: Broker) -> None:
    app = _app(broker)
    starts: list[float] = []
    lock = threading.Lock()

    @app.task(name="flow.tick", rate_limit="5/s")  # burst 5, then one token every 0.2 s
    def tick(i: int) -> None:
        with lock:
            starts.append(time.monotonic())

    claims: list[float] = []
    real_claim = broker.claim

    def counting_claim(*args: Any, **kwargs: Any) -> Any:
        claims.append(time.monotonic())
        return real_claim(*args, **kwargs)

    broker.claim = counting_claim  # type: ignore[method-assign]
    for i in range(10):
        tick.enqueue(i)
    with running(app, concurrency=4):
        wait_until(lambda: len(starts) == 10, timeout=30)
    gaps = [b - a for a, b in zip(sorted(starts)[5:], sorted(starts)[6:], strict=False)]
    assert statistics.median(gaps) < 0.6, gaps  # a token every 0.2 s, not a 5 s poll
    assert len(claims) < 60, "the worker sleeps until the next token, it does not spin"


def test_a_parked_worker_wakes_when_the_slot_frees(broker: Broker) -> None:
    app = _app(broker)
    ends: list[float] = []

    @app.task(name="flow.one", concurrency=ConcurrencyLimit(1, key="account"))
    def one(account: int, i: int) -> None:
        time.sleep(0.05)
        ends.append(time.monotonic())

    for i in range(4):
        one.enqueue(7, i)
    began = time.monotonic()
    with running(app, concurrency=4):
        wait_until(lambda: len(ends) == 4, timeout=30)
    assert max(ends) - began < POLL, "each end woke the worker for the next job"
