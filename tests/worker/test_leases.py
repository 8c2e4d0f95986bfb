"""Leases: the keeper extends every in-flight lease in ONE call; a lost lease discards the
attempt's outcome; successes are acknowledged in coalesced ``complete`` batches."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState, Middleware
from conveyor.broker.base import Broker
from conveyor.config import Settings
from tests.worker.conftest import FAST, running, wait_until


class Hooks(Middleware):
    """Records every worker hook call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def before_process(self, worker: Any, job: Any) -> None:
        self.calls.append(("before_process", job.id))

    def after_process(
        self, worker: Any, job: Any, *, outcome: str, duration: float, error: BaseException | None
    ) -> None:
        self.calls.append(("after_process", (job.id, outcome)))

    def on_lease_lost(self, worker: Any, job: Any) -> None:
        self.calls.append(("on_lease_lost", job.id))


def test_keeper_extends_all_leases_in_one_call(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lease deadlines run on a FakeClock that moves only after the keeper has extended at
    # the current time: a keeper round that comes back late on a loaded machine (it used to
    # run on the real clock with a 0.6 s lease) cannot expire a lease here.
    clock = FakeClock(time.time())
    app = Conveyor(broker, settings=Settings(**FAST), clock=clock, rng=random.Random(1))
    calls: list[tuple[int, float]] = []  # (leases, now) of each extend call that returned
    real_extend = app.broker.extend

    def extend(leases: Sequence[tuple[str, str]], now: float, vt: float) -> list[bool]:
        results = real_extend(leases, now, vt)
        calls.append((len(leases), now))
        return results

    monkeypatch.setattr(app.broker, "extend", extend)
    gate = threading.Event()

    @app.task
    def hold() -> None:
        gate.wait(30)

    jobs = [hold.enqueue() for _ in range(4)]
    with running(app, concurrency=4, visibility_timeout=0.6):  # keeper every 0.2 s
        for _ in range(5):  # 1.5 s of lease time: the leases outlive their 0.6 s
            at = clock.now()
            wait_until(lambda at=at: (4, at) in calls, timeout=30)  # all four, one call
            clock.advance(0.3)
        app.worker().maintain(app.now(), force=True)  # a reaper elsewhere finds nothing expired
        assert all(j.refresh().state is JobState.ACTIVE and j.lost == 0 for j in jobs)
        gate.set()
        wait_until(lambda: all(j.refresh().state is JobState.COMPLETED for j in jobs), 30)
    assert all(j.attempts == 1 for j in jobs)


def test_lost_lease_discards_the_outcome(live_app: Conveyor) -> None:
    app = live_app
    hooks = Hooks()
    app.middleware.append(hooks)
    gate = threading.Event()

    @app.task
    def hold() -> str:
        gate.wait(10)
        return "late"

    job = hold.enqueue()
    with running(app, visibility_timeout=0.6):
        wait_until(lambda: job.refresh().state is JobState.ACTIVE)
        # Another process's reaper decides the lease expired (as if this worker had stalled).
        app.broker.reap_expired(app.now() + 60, max_lost=5)
        assert job.refresh().state is JobState.PENDING
        other = app.dequeue("default", visibility_timeout=30)  # someone else owns it now
        assert other is not None
        wait_until(lambda: ("on_lease_lost", job.id) in hooks.calls, timeout=3)
        gate.set()
        wait_until(lambda: ("after_process", (job.id, "lease_lost")) in hooks.calls)
    snap = job.refresh()
    assert snap.state is JobState.ACTIVE and snap.result is None  # the late result was dropped
    other.ack("mine")
    assert job.refresh().result == "mine"


def test_successes_are_acknowledged_in_batches(
    live_app: Conveyor, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = live_app
    sizes: list[int] = []
    real_complete = app.broker.complete

    def complete(acks: Sequence[Any], now: float) -> list[bool]:
        sizes.append(len(acks))
        time.sleep(0.05)  # a slow broker: completions pile up meanwhile
        return real_complete(acks, now)

    monkeypatch.setattr(app.broker, "complete", complete)

    @app.task
    def quick(i: int) -> int:
        return i

    jobs = app.enqueue_many([quick.spec(i) for i in range(60)])
    with running(app, concurrency=20) as worker:
        wait_until(lambda: worker.processed == 60, timeout=10)
    assert sum(sizes) == 60 and len(sizes) < 30 and max(sizes) > 1, sizes
    assert [j.refresh().result for j in jobs] == list(range(60))


def test_a_lost_connection_while_recording_is_one_line_not_a_traceback_per_retry(
    live_app: Conveyor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The recorder's retries during an outage go to the broker's OutageLog shared with the
    claim loop: one "lost the connection" line, one "reconnected" line, no traceback (a CI run
    showed one traceback per retry of ``complete``)."""
    app = live_app
    down = threading.Event()
    failed_completes = [0]

    def unreachable(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if down.is_set():
                if name == "complete":
                    failed_completes[0] += 1
                    if failed_completes[0] == 4:
                        down.clear()  # back after the fourth failed write
                raise ConnectionResetError(104, "Connection reset by peer")
            return real(*args, **kwargs)

        return call

    for name in ("claim", "complete", "wait_for_work", "extend", "heartbeat"):
        if hasattr(app.broker, name):
            monkeypatch.setattr(app.broker, name, unreachable(name, getattr(app.broker, name)))

    @app.task
    def quick() -> str:
        down.set()  # the broker goes away while the job runs
        return "ok"

    job = quick.enqueue()
    with caplog.at_level(logging.INFO, logger="conveyor"), running(app) as worker:
        wait_until(lambda: worker.processed == 1, timeout=10)
    assert job.refresh().result == "ok" and failed_completes[0] == 4
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in lines if r.exc_info] == []
    messages = [r.getMessage() for r in lines]
    assert sum("lost the connection" in m for m in messages) == 1, messages
    assert sum("reconnected" in m for m in messages) == 1, messages


def test_a_keeper_that_keeps_failing_logs_one_traceback_per_run_of_failures(
    app: Conveyor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``extend`` that kept failing with an error that is not an outage (retried every
    second) logged a traceback every second; now one, then a line when it works again."""
    from conveyor.worker.lease_keeper import LeaseKeeper
    from conveyor.worker.running import Running

    app.enqueue("t")
    lease = app.broker.claim(["default"], app.now(), limit=1, worker_id="w", max_lost=3)[0]
    run = Running(lease, None, "thread", None)
    real = app.broker.extend
    failing = [True]

    def extend(*args: Any, **kwargs: Any) -> Any:
        if failing[0]:
            raise RuntimeError("refused\nforged: line")
        return real(*args, **kwargs)

    monkeypatch.setattr(app.broker, "extend", extend)
    keeper = LeaseKeeper(app.broker, app.now, lambda: [run], 30.0, lambda r: None)
    with caplog.at_level(logging.INFO, logger="conveyor.worker"):
        assert [keeper.extend_once() for _ in range(5)] == [False] * 5
        failing[0] = False
        assert keeper.extend_once() is True
    lines = [r for r in caplog.records if "lease keeper" in r.getMessage()]
    assert len([r for r in lines if r.exc_info]) == 1
    assert any("works again" in r.getMessage() for r in lines)
    assert len(lines) == 2
