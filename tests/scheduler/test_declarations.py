"""Declaring schedules in code and at run time: validation, upsert at scheduler start."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, Task, ValidationError
from conveyor.broker.base import Broker

from .support import drive, ts

START = ts(2024, 6, 1, 10, 0)


def report() -> str:
    """A task body."""
    return "ok"


def test_cron_decorator_registers_the_task_and_returns_it(app: Conveyor) -> None:
    decorated = app.cron("0 9 * * mon-fri", tz="Europe/Berlin", name="digest")(report)
    assert isinstance(decorated, Task)
    assert app.tasks["report"] is decorated
    assert decorated() == "ok"
    assert app.schedules.declared["digest"].cron == "0 9 * * mon-fri"
    assert app.list_schedules() == []  # stored when a scheduler starts


def test_cron_decorator_on_an_existing_task_keeps_its_options(app: Conveyor) -> None:
    task = app.task(report, queue="high", priority=-1)
    assert app.every(timedelta(minutes=5))(task) is task
    assert app.schedules.declared["report"].every == 300


@pytest.mark.parametrize(
    ("call", "field", "words"),
    [
        (lambda app: app.cron("not a cron"), "cron", "fields"),
        (lambda app: app.cron("61 * * * *"), "cron", "minute"),
        (lambda app: app.cron("0 25 * * *"), "cron", "hour"),
        (lambda app: app.cron("0 0 32 * *"), "cron", "day"),
        (lambda app: app.cron("0 0 * 13 *"), "cron", "month"),
        (lambda app: app.cron("0 0 * * 9"), "cron", "weekday"),
        (lambda app: app.cron("@fortnightly"), "cron", "alias"),
        (lambda app: app.cron("* * * * *", tz="Mars/Olympus_Mons"), "tz", "unknown time zone"),
        (lambda app: app.every(0), "every", ">= 1"),
        (lambda app: app.every(1.5), "every", "whole"),
        (lambda app: app.cron("* * * * *", misfire="sometimes"), "misfire", "run_once"),
        (lambda app: app.cron("* * * * *", overlap="maybe"), "overlap", "allow"),
        (lambda app: app.cron("* * * * *", max_backfill=0), "max_backfill", "1.."),
        (lambda app: app.cron("* * * * *", name="has space"), "name", "schedule name"),
        (lambda app: app.cron("* * * * *", queue="bad queue!"), "queue", ""),
        (lambda app: app.cron("* * * * *", colour="red"), "options", "colour"),
        (lambda app: app.schedule_cron("x", "report", "0 0 * * * *"), "cron", "5 fields"),
        (lambda app: app.schedule_cron("x", "report", "* * * * *", tz="Nowhere"), "tz", ""),
        (lambda app: app.schedule_cron("x", "report"), "schedule", "exactly one"),
        (lambda app: app.schedule_cron("x", "report", "* * * * *", args=[object()]), "args", ""),
    ],
)
def test_bad_declarations_name_the_field(app: Conveyor, call: Any, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        call(app)
    assert info.value.field == field
    assert words in str(info.value)
    assert app.list_schedules() == []


def test_schedule_cron_returns_the_stored_schedule(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    schedule = app.schedule_cron("r", "report", "*/5 * * * *", tz="Asia/Tokyo", misfire="skip")
    assert schedule.next_fire_at == START + 300
    assert app.list_schedules() == [schedule]
    assert (schedule.task, schedule.tz, schedule.misfire, schedule.source) == (
        "report",
        "Asia/Tokyo",
        "skip",
        "runtime",
    )


def _restart(broker: Broker, clock: FakeClock, expr: str, **options: Any) -> Conveyor:
    """A fresh process: a new app on the same broker declaring the schedule again."""
    app = Conveyor(broker, clock=clock, rng=random.Random(1))
    app.cron(expr, name="r", **options)(report)
    app.scheduler().tick()
    return app


def test_upsert_unchanged_keeps_state(broker: Broker, clock: FakeClock) -> None:
    clock.set(START)
    first = _restart(broker, clock, "*/10 * * * *")
    drive(clock, [first.scheduler()], START + 1200)
    first.pause_schedule("r")
    before = first.schedules.get("r")
    clock.set(START + 1500)
    second = _restart(broker, clock, "*/10 * * * *")
    after = second.schedules.get("r")
    assert after == before  # same rev, next run, last job, still paused


def test_upsert_changed_expression_recomputes_next_run(broker: Broker, clock: FakeClock) -> None:
    clock.set(START)
    first = _restart(broker, clock, "0 * * * *")
    assert first.schedules.get("r").next_fire_at == START + 3600
    clock.set(START + 60)
    second = _restart(broker, clock, "*/5 * * * *")
    stored = second.schedules.get("r")
    assert (stored.cron, stored.next_fire_at) == ("*/5 * * * *", START + 300)
    clock.set(START + 120)
    third = _restart(broker, clock, "*/5 * * * *", tz="Europe/Paris")  # tz is timing too
    assert third.schedules.get("r").updated_at == START + 120


def test_upsert_changed_arguments_keeps_next_run(broker: Broker, clock: FakeClock) -> None:
    clock.set(START)
    _restart(broker, clock, "0 * * * *")
    clock.set(START + 60)
    app = _restart(broker, clock, "0 * * * *", kwargs={"to": "ops"}, queue="reports")
    stored = app.schedules.get("r")
    assert (stored.kwargs, stored.queue, stored.next_fire_at) == (
        {"to": "ops"},
        "reports",
        START + 3600,
    )


def test_declaring_the_same_name_twice_differently_is_refused(app: Conveyor) -> None:
    app.cron("@daily", name="same")(report)
    with pytest.raises(ValidationError) as info:
        app.cron("@hourly", name="same")(report)
    assert info.value.field == "name"


def test_code_schedule_removed_at_run_time_returns_on_next_start(
    app: Conveyor, clock: FakeClock
) -> None:
    app.cron("@hourly", name="back")(report)
    app.scheduler().tick()
    assert app.unschedule("back")
    assert app.list_schedules() == []
    app.scheduler().tick()
    assert [s.name for s in app.list_schedules()] == ["back"]


def test_scheduler_without_sync_leaves_declarations_alone(app: Conveyor) -> None:
    app.cron("@hourly", name="quiet")(report)
    app.scheduler(sync=False).tick()
    assert app.list_schedules() == []
