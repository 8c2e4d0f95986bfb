"""Cron and interval schedules fire at the right instants: counts, time zones, DST, aliases."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conveyor import Conveyor, FakeClock

from .support import drive, drive_due, fire_times, jobs, local, ts, utc

NY = "America/New_York"
BERLIN = "Europe/Berlin"


def noop(*args: object, **kwargs: object) -> None:
    """A task body."""


def test_every_two_minutes_over_ten_minutes_is_five_jobs(app: Conveyor, clock: FakeClock) -> None:
    start = ts(2024, 5, 1, 12, 0)
    clock.set(start)
    app.cron("*/2 * * * *", name="two")(noop)
    scheduler = app.scheduler()
    assert scheduler.tick() == 0  # created at 12:00:00: the first tick is the next one, 12:02
    assert drive(clock, [scheduler], start + 600, step=10) == 5
    assert [utc(t).minute for t in fire_times(app)] == [2, 4, 6, 8, 10]
    assert {j.id for j in jobs(app)} == {f"sched:two:{int(t * 1000)}" for t in fire_times(app)}


def test_jobs_carry_the_schedule_arguments_queue_and_priority(
    app: Conveyor, clock: FakeClock
) -> None:
    clock.set(ts(2024, 5, 1, 12, 0))
    app.task(noop)
    app.schedule_cron(
        "r", "noop", "* * * * *", args=[1, "a"], kwargs={"k": [1, 2]}, queue="reports", priority=-3
    )
    scheduler = app.scheduler()
    drive(clock, [scheduler], clock.now() + 60)
    (job,) = jobs(app, "noop")
    assert (job.args, job.kwargs, job.queue, job.priority) == (
        [1, "a"],
        {"k": [1, 2]},
        "reports",
        -3,
    )
    assert job.metadata == {"schedule": "r", "fire_at": ts(2024, 5, 1, 12, 1)}
    assert job.idempotency_key == job.id
    assert job.idempotency_ttl >= 120  # covers at least two periods


def test_daily_0230_new_york_across_spring_forward(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 3, 8, 0, 0, NY))
    app.cron("30 2 * * *", tz=NY, name="nightly")(noop)
    drive_due(app, clock, app.scheduler(), ts(2024, 3, 12, 0, 0, NY))
    walls = [local(t, NY) for t in fire_times(app)]
    assert [(w.day, w.hour, w.minute) for w in walls] == [
        (8, 2, 30),
        (9, 2, 30),
        (10, 3, 0),  # 02:30 does not exist on March 10: one run at the end of the gap
        (11, 2, 30),
    ]
    assert [w.utcoffset() for w in walls] == [timedelta(hours=h) for h in (-5, -5, -4, -4)]


def test_daily_0230_new_york_across_fall_back(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 11, 1, 12, 0, NY))
    app.cron("30 2 * * *", tz=NY, name="nightly")(noop)
    scheduler = app.scheduler()
    drive_due(app, clock, scheduler, ts(2024, 11, 3, 0, 0, NY))
    drive(
        clock, [scheduler], ts(2024, 11, 3, 4, 0, NY), step=60
    )  # minute by minute over both 01:xx
    drive_due(app, clock, scheduler, ts(2024, 11, 5, 0, 0, NY))
    fires = fire_times(app)
    assert [utc(t).strftime("%m-%d %H:%M") for t in fires] == [
        "11-02 06:30",  # 02:30 EDT
        "11-03 07:30",  # 02:30 EST: exactly once on the change day
        "11-04 07:30",
    ]


def test_ambiguous_0130_runs_once_at_its_first_occurrence(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 11, 2, 12, 0, NY))
    app.cron("30 1 * * *", tz=NY, name="early")(noop)
    scheduler = app.scheduler()
    drive_due(app, clock, scheduler, ts(2024, 11, 3, 0, 0, NY))
    drive(clock, [scheduler], ts(2024, 11, 3, 4, 0, NY), step=60)  # through the repeated hour
    drive_due(app, clock, scheduler, ts(2024, 11, 3, 23, 0, NY))
    fires = fire_times(app)
    assert len(fires) == 1
    assert utc(fires[0]).strftime("%m-%d %H:%M") == "11-03 05:30"  # 01:30 EDT, not 01:30 EST


def test_berlin_weekly_keeps_local_time_across_dst(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 3, 20, 0, 0, BERLIN))
    app.cron("0 9 * * mon", tz=BERLIN, name="weekly")(noop)
    drive_due(app, clock, app.scheduler(), ts(2024, 4, 10, 0, 0, BERLIN))
    fires = fire_times(app)
    assert [(local(t, BERLIN).day, local(t, BERLIN).hour) for t in fires] == [
        (25, 9),
        (1, 9),
        (8, 9),
    ]
    assert [utc(t).hour for t in fires] == [8, 7, 7]  # CET then CEST


def test_weekday_names_and_aliases(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 5, 6, 0, 0, BERLIN))  # a Monday
    app.task(noop)
    app.schedule_cron("digest", "noop", "0 9 * * mon-fri", tz=BERLIN)
    app.schedule_cron("hourly", "noop", "@hourly")
    app.schedule_cron("daily", "noop", "@daily")
    drive_due(app, clock, app.scheduler(), ts(2024, 5, 13, 0, 0, BERLIN) - 1)
    by_schedule: dict[str, int] = {}
    for job in jobs(app):
        by_schedule[job.metadata["schedule"]] = by_schedule.get(job.metadata["schedule"], 0) + 1
    assert by_schedule == {"digest": 5, "hourly": 7 * 24 - 1, "daily": 7}


@pytest.mark.parametrize("every", [30, timedelta(seconds=30), 30.0])
def test_interval_schedule(app: Conveyor, clock: FakeClock, every: object) -> None:
    clock.set(ts(2024, 5, 1, 12, 0))
    app.every(every, name="often")(noop)
    assert drive(clock, [app.scheduler()], clock.now() + 300, step=5) == 10
    assert all(t % 30 == 0 for t in fire_times(app))


def test_next_runs_lists_upcoming_times(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 3, 9, 12, 0, NY))
    app.task(noop)
    app.schedule_cron("nightly", "noop", "30 2 * * *", tz=NY)
    runs = app.schedules.next_runs("nightly", 3)
    assert [local(t, NY).strftime("%d %H:%M") for t in runs] == ["10 03:00", "11 02:30", "12 02:30"]
