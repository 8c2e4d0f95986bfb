"""A failed periodic pass is retried sooner than its period, with a capped backoff.

The scheduler's reap plugin marked its pass done before doing it, so a pass that failed (the
broker unreachable for a moment, a refused write) waited a full ``reap_interval`` for the next
attempt; any plugin that raised was ticked again exactly 1 s later, however long it kept
failing. A worker's own reaping (``maintain``) had the reap plugin's flaw, and ``app.dequeue``'s
too. Now a failed pass is retried after ``outage.retry_delay`` (0.5 s doubled per failure, at
most the duty's period, half of it jittered from the app's rng), a connection error is logged once
per outage (``OutageLog``) and any other error with its traceback once per run of failures.

The faults are injected into the real backends' methods (as tests/worker/test_leases.py does).
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.errors import BrokerUnavailable
from conveyor.outage import retry_delay
from conveyor.scheduler import Plugin

from .support import ts

START = ts(2024, 6, 1, 10, 0)


def send(to: str) -> None:
    """A task body."""


def _failing(
    monkeypatch: pytest.MonkeyPatch, app: Conveyor, name: str, times: int, exc: Exception
) -> list[float]:
    """Make the broker's ``name`` raise ``exc`` on its first ``times`` calls; returns the
    ``now`` of every call."""
    real = getattr(app.broker, name)
    calls: list[float] = []

    def flaky(now: float, *args: Any, **kwargs: Any) -> Any:
        calls.append(now)
        if len(calls) <= times:
            raise exc
        return real(now, *args, **kwargs)

    monkeypatch.setattr(app.broker, name, flaky)
    return calls


def _expired_lease(app: Conveyor, clock: FakeClock) -> Any:
    clock.set(START)
    app.task(send)
    job = app.enqueue("send", args=["e@x"])
    assert app.dequeue("default", visibility_timeout=1) is not None
    return job


def _run(app: Conveyor, clock: FakeClock, scheduler: Any, offsets: list[float]) -> None:
    for offset in offsets:
        clock.set(START + offset)
        scheduler.tick()


def test_a_failed_reap_pass_is_retried_within_a_second_not_a_reap_interval(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _expired_lease(app, clock)
    scheduler = app.scheduler(reap_interval=60)
    calls = _failing(monkeypatch, app, "reap_expired", 2, RuntimeError("refused"))
    _run(app, clock, scheduler, [2, 2.5, 3.5])  # fails, fails, then works
    assert calls == [START + 2, START + 2.5, START + 3.5]
    assert app.get_job(job.id).state is JobState.PENDING and scheduler.reaped == 1
    _run(app, clock, scheduler, [4, 30, 61.9])  # done: the next pass a period after the election
    assert len(calls) == 3
    _run(app, clock, scheduler, [62])
    assert len(calls) == 4


def test_the_retries_back_off_up_to_the_period(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _expired_lease(app, clock)
    scheduler = app.scheduler(reap_interval=5)
    calls = _failing(monkeypatch, app, "reap_expired", 1000, RuntimeError("refused"))
    for step in range(2000):  # 200 s in steps of 0.1 s
        clock.set(START + 2 + step / 10)
        scheduler.tick()
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] <= 0.5 + 0.1  # the first retry is soon
    assert max(gaps) <= 5 + 0.1  # never later than the period
    assert sum(1 for g in gaps if g >= 2.5) >= len(gaps) - 4  # backed off: not every 0.5 s


def test_a_plugin_that_keeps_failing_is_logged_once_per_run_of_failures(
    app: Conveyor, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Plugin):
        name = "broken"

        def __init__(self) -> None:
            self.ticks: list[float] = []
            self.fail = True

        def tick(self, now: float) -> float | None:
            self.ticks.append(now)
            if self.fail:
                raise RuntimeError("boom\nforged: line")
            return now + 3600

    plugin = Broken()
    scheduler = app.scheduler(plugins=[plugin])
    with caplog.at_level(logging.INFO, logger="conveyor.scheduler"):
        for step in range(100):  # 10 s
            clock.set(START + step / 10)
            scheduler.tick()
        assert 4 <= len(plugin.ticks) <= 20  # retried, within a second each time (its cap)
        plugin.fail = False
        clock.set(START + 11)
        scheduler.tick()
    lines = [r for r in caplog.records if "broken" in r.getMessage()]
    assert len([r for r in lines if r.exc_info]) == 1  # one traceback for the whole run
    assert any("works again" in r.getMessage() for r in lines)
    assert len(lines) == 2


def test_an_outage_of_the_reaper_is_logged_once(
    app: Conveyor,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = _expired_lease(app, clock)
    scheduler = app.scheduler(reap_interval=60)
    for name in ("promote_due", "reap_expired"):  # an outage of 10 s: every call fails
        real = getattr(app.broker, name)

        def down(now: float, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if now < START + 12:
                raise BrokerUnavailable("connection refused")
            return _real(now, *args, **kwargs)

        monkeypatch.setattr(app.broker, name, down)
    with caplog.at_level(logging.WARNING, logger="conveyor"):
        for step in range(400):  # 40 s: the retries back off to at most 16 s by then
            clock.set(START + 2 + step / 10)
            scheduler.tick()
    assert app.get_job(job.id).state is JobState.PENDING  # reaped soon after the outage
    assert scheduler.reaped == 1
    lost = [r for r in caplog.records if "lost the connection" in r.getMessage()]
    back = [r for r in caplog.records if "reconnected" in r.getMessage()]
    assert len(lost) == 1 and len(back) == 1
    assert not [r for r in caplog.records if r.exc_info]


def test_a_workers_failed_reap_is_retried_sooner(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _expired_lease(app, clock)
    worker = app.worker()
    interval = app.runtime.settings.reap_interval
    calls = _failing(monkeypatch, app, "reap_expired", 1, RuntimeError("refused"))
    clock.set(START + 2)
    with pytest.raises(RuntimeError):
        worker.maintain(clock.now())
    clock.set(START + 2 + 0.5)
    worker.maintain(clock.now())  # within the first retry's delay (0.5 s at most)
    assert calls == [START + 2, START + 2.5]
    assert app.get_job(job.id).state is JobState.PENDING
    clock.set(START + 2.5 + interval / 2)
    worker.maintain(clock.now())
    assert len(calls) == 2  # a success: the next pass a reap_interval later


def test_a_failed_reap_in_dequeue_is_tried_again_by_the_next_dequeue(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _expired_lease(app, clock)
    calls = _failing(monkeypatch, app, "reap_expired", 1, RuntimeError("refused"))
    clock.set(START + 2)
    with pytest.raises(RuntimeError):
        app.dequeue("default")
    delivery = app.dequeue("default")  # reaps first: the expired lease is delivered again
    assert len(calls) == 2
    assert delivery is not None and delivery.id == job.id


def test_a_failed_alert_evaluation_is_retried_sooner_and_logged_once(
    app: Conveyor,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The alert manager marked its evaluation done before doing it (the next one came an
    ``interval``, 30 s, later) and the plugin logged a traceback on every pass meanwhile."""
    from conveyor.monitoring.alerts import AlertManager

    manager = AlertManager(app, interval=30)
    app._alerts = manager  # type: ignore[attr-defined]  # what app.alerts returns
    real = manager.states
    reads: list[float] = []

    def states(include_resolved: bool = True) -> Any:
        reads.append(clock.now())
        if len(reads) <= 3:
            raise RuntimeError("refused")
        return real(include_resolved)

    monkeypatch.setattr(manager, "states", states)
    scheduler = app.scheduler()
    with caplog.at_level(logging.INFO, logger="conveyor"):
        for step in range(100):  # 10 s
            clock.set(START + step / 10)
            scheduler.tick()
    assert len(reads) == 4  # three failures, retried within seconds, then one success
    assert reads[-1] < START + 6
    lines = [r for r in caplog.records if "alerts" in r.getMessage()]
    assert len([r for r in lines if r.exc_info]) == 1


@pytest.mark.parametrize("seed", range(20))
def test_retry_delay_is_capped_exponential_with_equal_jitter(seed: int) -> None:
    rng: Callable[[], random.Random] = lambda: random.Random(seed)  # noqa: E731
    for failures, cap, top in [(1, 60, 0.5), (2, 60, 1), (5, 60, 8), (20, 60, 60), (3, 1, 1)]:
        delay = retry_delay(failures, cap, rng())
        assert top / 2 <= delay <= top
    assert retry_delay(3, 60, random.Random(seed)) == retry_delay(3, 60, random.Random(seed))
