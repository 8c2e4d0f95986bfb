"""Quiet against a claim already on its way: a worker that reports "quiet" runs nothing new.

The claim loop checks the quiet flag, then claims. An operator's ``quiet`` can arrive between
the two (the heartbeat thread sets the flag and publishes state "quiet" at once); the claim then
leases jobs enqueued after the worker said it was quiet. Those are given back (as Sidekiq
requeues work fetched after quiet), uncharged. Here the claim is held between the check and the
broker call, deterministically, instead of hoping a loaded machine deschedules the loop there
(tests/dashboard/test_browser_ops.py::test_quiet_then_stop_a_running_worker saw it once).
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.broker.base import Broker
from conveyor.config import Settings

from .conftest import FAST, running, wait_until


def test_a_claim_on_its_way_when_quiet_arrives_gives_its_jobs_back(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Conveyor(broker, settings=Settings(**FAST), rng=random.Random(3))  # type: ignore[arg-type]
    gate = threading.Event()
    ran: list[int] = []

    @app.task
    def held(n: int) -> None:
        ran.append(n)
        gate.wait(30)

    real_claim = app.broker.claim
    armed, inside, go, back = threading.Event(), threading.Event(), threading.Event(), []

    def claim(*args: Any, **kwargs: Any) -> Any:
        if armed.is_set():
            armed.clear()
            inside.set()  # past the loop's quiet check, before the broker call
            go.wait(30)
            leases = real_claim(*args, **kwargs)
            back.append(len(leases))
            return leases
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(app.broker, "claim", claim)
    first = held.enqueue(1)
    try:
        with running(app, concurrency=2) as worker:
            wait_until(lambda: first.refresh().state is JobState.ACTIVE, timeout=30)
            armed.set()  # the loop's next claim (one slot is free) stops inside
            wait_until(inside.is_set, timeout=30)
            worker._on_command("quiet")  # what the heartbeat does when it reads the flag
            assert worker.describe()["state"] == "quiet"
            late = held.enqueue(2)  # enqueued after the worker reported quiet
            go.set()
            wait_until(lambda: back, timeout=30)
            assert back == [1]  # the claim on its way leased the late job ...
            wait_until(lambda: len(ran) > 1 or late.refresh().state is JobState.PENDING, 30)
            assert ran == [1], "a quiet worker started a job enqueued after it said quiet"
            snap = late.refresh()  # ... and gave it back, uncharged
            assert snap.state is JobState.PENDING and snap.attempts == 0, snap
            gate.set()
            wait_until(lambda: first.refresh().state is JobState.COMPLETED, timeout=30)
            assert late.refresh().state is JobState.PENDING and ran == [1]
    finally:
        gate.set()
        go.set()
