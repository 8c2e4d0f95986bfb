"""Delayed jobs become claimable at their run time and never before; the scheduler promotes due
jobs, reaps expired leases (one effective pass per interval across schedulers) and runs alerts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState, ValidationError

from .support import ts

START = ts(2024, 6, 1, 10, 0)


def send(to: str) -> None:
    """A task body."""


def test_enqueue_in_is_claimable_at_its_run_time_and_never_before(
    app: Conveyor, clock: FakeClock
) -> None:
    clock.set(START)
    task = app.task(send)
    job = task.enqueue_in(30, "a@x")
    assert job.state is JobState.SCHEDULED and job.run_at == START + 30
    clock.set(START + 29.999)
    assert app.scheduler().tick() == 0
    assert app.dequeue("default") is None
    assert app.get_job(job.id).state is JobState.SCHEDULED
    clock.set(START + 30)
    delivery = app.dequeue("default")
    assert delivery is not None and delivery.id == job.id
    delivery.ack()


def test_scheduler_promotes_due_jobs(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    task = app.task(send)
    jobs = [task.enqueue_in(timedelta(seconds=s), str(s)) for s in (10, 20, 30)]
    scheduler = app.scheduler()
    clock.set(START + 20)
    scheduler.tick()
    states = [app.get_job(j.id).state for j in jobs]
    assert states == [JobState.PENDING, JobState.PENDING, JobState.SCHEDULED]
    assert scheduler.promoted == 2
    assert [j.id for j in app.peek("default")] == [jobs[0].id, jobs[1].id]


def test_enqueue_at_aware_datetime(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    task = app.task(send)
    when = datetime.fromtimestamp(START + 3600, UTC).astimezone(
        __import__("zoneinfo").ZoneInfo("Asia/Kolkata")
    )
    job = task.enqueue_at(when, "b@x")
    assert job.run_at == START + 3600
    clock.set(START + 3599)
    assert app.dequeue("default") is None
    clock.set(START + 3600)
    assert app.dequeue("default") is not None


def test_naive_datetime_is_refused(app: Conveyor) -> None:
    task = app.task(send)
    with pytest.raises(ValidationError) as info:
        task.enqueue_at(datetime(2030, 1, 1, 9, 0), "c@x")
    assert info.value.field == "run_at"


def test_cancel_a_scheduled_job_before_it_is_due(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    task = app.task(send)
    job = task.enqueue_in(60, "d@x")
    assert app.cancel(job.id) is True
    assert app.get_job(job.id).state is JobState.CANCELLED
    clock.set(START + 120)
    app.scheduler().tick()
    assert app.dequeue("default") is None
    assert app.get_job(job.id).state is JobState.CANCELLED


def test_reaper_runs_once_per_interval_across_schedulers(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(send)
    first = app.scheduler(reap_interval=5)
    second = app.scheduler(reap_interval=5)
    job = app.enqueue("send", args=["e@x"])
    assert app.dequeue("default", visibility_timeout=1) is not None
    clock.set(START + 2)
    first.tick()  # lease expired at START + 1: reaped
    assert app.get_job(job.id).state is JobState.PENDING and app.get_job(job.id).lost == 1
    assert app.dequeue("default", visibility_timeout=1) is not None
    clock.set(START + 4)
    second.tick()  # expired again, but a reaper pass ran 2 s ago (by the other scheduler)
    assert app.get_job(job.id).state is JobState.ACTIVE
    clock.set(START + 7)
    second.tick()
    assert app.get_job(job.id).state is JobState.PENDING and app.get_job(job.id).lost == 2
    assert first.reaped + second.reaped == 2


class _Manager:
    """Stands in for an ``AlertManager``: ``maybe_evaluate`` is called on every tick."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def maybe_evaluate(self, now: float | None = None) -> None:
        assert now is not None
        self.calls.append(now)


def test_alert_manager_is_offered_every_tick(app: Conveyor, clock: FakeClock) -> None:
    manager = _Manager()
    app._alerts = manager  # type: ignore[attr-defined]  # what app.alerts returns
    scheduler = app.scheduler()
    for offset in (0, 1, 2):
        clock.set(START + offset)
        scheduler.tick()
    assert manager.calls == [START, START + 1, START + 2]


def test_alerts_are_offered_at_most_every_alert_interval(app: Conveyor, clock: FakeClock) -> None:
    evaluator = _Manager()
    app._alerts = evaluator  # type: ignore[attr-defined]
    scheduler = app.scheduler(alert_interval=5)
    for offset in (0, 1, 2, 5, 6, 10):
        clock.set(START + offset)
        scheduler.tick()
    assert evaluator.calls == [START, START + 5, START + 10]


def test_alert_errors_do_not_stop_the_scheduler(app: Conveyor, clock: FakeClock) -> None:
    class Broken:
        def maybe_evaluate(self, now: float) -> Any:
            raise RuntimeError("boom")

    app._alerts = Broken()  # type: ignore[attr-defined]
    clock.set(START)
    app.task(send)
    app.schedule_cron("m", "send", "* * * * *", args=["x"])
    clock.set(START + 60)
    scheduler = app.scheduler()
    scheduler.tick()
    clock.advance(60)
    assert scheduler.tick() == 1


def test_real_alert_rules_run_in_the_scheduler(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    manager = app.alerts
    manager.interval = 0
    seen: list[dict[str, Any]] = []

    class Capture:
        def notify(self, payload: Any) -> bool:
            seen.append(dict(payload))
            return True

    manager.notifiers = [Capture()]
    app.task(send)
    for _ in range(3):
        app.enqueue("send", args=["x"])
    manager.add_rule({"name": "backlog", "type": "queue_depth", "threshold": 2})
    app.scheduler().tick()
    assert [p.get("state") for p in seen] == ["firing"]
