"""Misfire and overlap policies, pause/resume, unschedule, and the schedule history."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.scheduler import ScheduleNotFound, plan_fires

from .support import drive, fire_times, jobs, outcomes, ts

START = ts(2024, 6, 1, 10, 0)


def noop() -> None:
    """A task body."""


def _outage(app: Conveyor, clock: FakeClock, **options: Any) -> tuple[int, list[float]]:
    """Run a quarter-hourly schedule to 10:00, stop every scheduler for 3 hours, then tick at
    13:07. Returns (jobs enqueued by the recovery tick, fire times of those jobs)."""
    clock.set(START - 3600)
    app.task(noop)
    app.schedule_cron("q", "noop", "*/15 * * * *", **options)
    drive(clock, [app.scheduler()], START + 30)
    before = set(fire_times(app))
    assert max(before) == START
    clock.set(ts(2024, 6, 1, 13, 7))  # missed: 10:15 ... 13:00 = 12 ticks
    recovered = app.scheduler()
    count = recovered.tick()
    after = sorted(set(fire_times(app)) - before)
    assert app.schedules.get("q").next_fire_at == ts(2024, 6, 1, 13, 15)
    assert recovered.tick() == 0  # nothing more until 13:15
    return count, after


def _misfire_entry(app: Conveyor) -> dict[str, Any]:
    (entry,) = [e for e in app.schedules.history("q") if e["outcome"] == "skipped-misfire"]
    return entry


def test_misfire_skip(app: Conveyor, clock: FakeClock) -> None:
    assert _outage(app, clock, misfire="skip") == (0, [])
    entry = _misfire_entry(app)
    assert (entry["fire_at"], entry["through"], entry["missed"]) == (
        ts(2024, 6, 1, 10, 15),
        ts(2024, 6, 1, 13, 0),
        12,
    )


def test_misfire_run_once_is_the_default(app: Conveyor, clock: FakeClock) -> None:
    assert _outage(app, clock) == (1, [ts(2024, 6, 1, 13, 0)])  # one catch-up run: latest tick
    entry = _misfire_entry(app)
    assert (entry["through"], entry["missed"]) == (ts(2024, 6, 1, 12, 45), 11)


def test_misfire_backfill_all(app: Conveyor, clock: FakeClock) -> None:
    count, fires = _outage(app, clock, misfire="backfill")
    assert count == 12
    assert fires == [START + 900 * k for k in range(1, 13)]
    assert "skipped-misfire" not in outcomes(app, "q")


def test_misfire_backfill_is_capped(app: Conveyor, clock: FakeClock) -> None:
    count, fires = _outage(app, clock, misfire="backfill", max_backfill=5)
    assert count == 5
    assert fires == [ts(2024, 6, 1, 12, 0) + 900 * k for k in range(5)]  # the latest five
    entry = _misfire_entry(app)
    assert (entry["fire_at"], entry["through"], entry["missed"]) == (
        ts(2024, 6, 1, 10, 15),
        ts(2024, 6, 1, 11, 45),
        7,
    )


@pytest.mark.parametrize("timing", [{"expr": "* * * * *"}, {"every": 60}], ids=["cron", "every"])
def test_backfill_over_a_thousand_ticks_runs_max_backfill_of_them(
    app: Conveyor, clock: FakeClock, timing: dict[str, Any]
) -> None:
    # max_backfill accepts up to 10,000, but one pass runs at most 1,000 ticks: the rest of
    # the backfill was dropped (for cron without any skipped-misfire entry: cron counts
    # stopped at 1,000 too, so nothing looked missed)
    clock.set(START)
    app.task(noop)
    app.schedule_cron("b", "noop", **timing, misfire="backfill", max_backfill=1200)
    clock.set(START + 1500 * 60 + 30)  # 1,500 missed minutes
    plan = plan_fires(app.schedules.get("b"), clock.now())
    assert plan is not None and len(plan.fires) == 1000  # one pass; the rest next pass
    assert (plan.missed, plan.missed_first, plan.missed_last) == (300, START + 60, START + 18000)
    scheduler = app.scheduler()
    assert scheduler.tick() + scheduler.tick() + scheduler.tick() == 1200
    assert scheduler.tick() == 0
    assert fire_times(app) == [START + 60 * k for k in range(301, 1501)]  # the latest 1,200
    assert app.schedules.get("b").next_fire_at == START + 1501 * 60


def test_late_within_grace_is_not_a_misfire(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("m", "noop", "* * * * *", misfire="skip", misfire_grace=300)
    clock.set(START + 240)  # four ticks, all within five minutes: all run
    assert app.scheduler().tick() == 4


def test_a_running_scheduler_noticing_a_tick_within_its_pass_interval_is_not_a_misfire(
    app: Conveyor, clock: FakeClock
) -> None:
    # misfire_grace=0 with misfire="skip" ("drop whatever was missed"): a running scheduler
    # passes every `interval` (0.5 s) and sees each tick up to that much after its time; every
    # tick was judged late and skipped, so the schedule never ran at all
    clock.set(START)
    app.task(noop)
    app.schedule_cron("i", "noop", every=10, misfire="skip", misfire_grace=0)
    scheduler = app.scheduler(interval=0.5)
    for k in range(1, 201):  # 100 s of passes, each 0.3 s after a half second
        clock.set(START + 0.5 * k - 0.2)
        scheduler.tick()
    assert fire_times(app) == [START + 10 * k for k in range(1, 10)]
    assert "skipped-misfire" not in outcomes(app, "i")
    clock.set(START + 100 + 30)  # a real outage (30 s without a pass): still a misfire
    assert scheduler.tick() == 0 and "skipped-misfire" in outcomes(app, "i")


def test_overlap_skip_while_previous_run_is_pending_or_active(
    app: Conveyor, clock: FakeClock
) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("o", "noop", "* * * * *", overlap="skip")
    scheduler = app.scheduler()
    clock.set(START + 60)
    assert scheduler.tick() == 1  # 10:01 enqueued, nobody runs it
    clock.set(START + 120)
    assert scheduler.tick() == 0  # 10:02: previous still pending
    delivery = app.dequeue("default", visibility_timeout=600)
    assert delivery is not None
    clock.set(START + 180)
    assert scheduler.tick() == 0  # 10:03: previous active
    delivery.ack()
    clock.set(START + 240)
    assert scheduler.tick() == 1  # 10:04: previous completed
    assert outcomes(app, "o") == ["enqueued", "skipped-overlap", "skipped-overlap", "enqueued"]
    (skip, *_) = [e for e in app.schedules.history("o") if e["outcome"] == "skipped-overlap"]
    assert skip["running"] == f"sched:o:{int((START + 60) * 1000)}"


def test_overlap_allow_is_the_default(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("o", "noop", "* * * * *")
    assert drive(clock, [app.scheduler()], START + 300) == 5


def test_backfill_with_overlap_skip_runs_one(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("o", "noop", "* * * * *", overlap="skip", misfire="backfill")
    clock.set(START + 3600)
    assert app.scheduler().tick() == 1  # 10:01 runs; the 59 later ticks overlap it
    assert fire_times(app) == [START + 60]
    assert outcomes(app, "o") == ["skipped-overlap"] * 50  # history keeps the newest 50


def test_pause_then_resume(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("p", "noop", "* * * * *")
    scheduler = app.scheduler()
    assert drive(clock, [scheduler], START + 300) == 5
    app.pause_schedule("p")
    assert app.list_schedules()[0].paused
    assert drive(clock, [scheduler], START + 900) == 0  # nothing while paused
    app.resume_schedule("p")
    assert app.schedules.get("p").next_fire_at == START + 960  # no catch-up of the pause
    assert drive(clock, [scheduler], START + 1200) == 5  # normal after
    assert [t - START for t in fire_times(app)] == [
        60 * k for k in (1, 2, 3, 4, 5, 16, 17, 18, 19, 20)
    ]
    assert "skipped-misfire" not in outcomes(app, "p")


def test_pause_and_resume_are_idempotent_and_name_checked(app: Conveyor, clock: FakeClock) -> None:
    app.task(noop)
    app.schedule_cron("p", "noop", "@hourly")
    app.pause_schedule("p")
    app.pause_schedule("p")
    app.resume_schedule("p")
    app.resume_schedule("p")
    assert not app.schedules.get("p").paused
    with pytest.raises(ScheduleNotFound):
        app.pause_schedule("nope")


def test_unschedule(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("u", "noop", "* * * * *")
    app.schedule_cron("keep", "noop", "*/2 * * * *")
    scheduler = app.scheduler()
    assert drive(clock, [scheduler], START + 120) == 3
    assert app.unschedule("u") is True
    assert app.unschedule("u") is False
    assert [s.name for s in app.list_schedules()] == ["keep"]
    assert drive(clock, [scheduler], START + 600) == 4  # only "keep" fires
    assert {j.metadata["schedule"] for j in jobs(app) if j.created_at > START + 120} == {"keep"}


def test_history_records_fire_time_job_and_outcome(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("h", "noop", "* * * * *")
    scheduler = app.scheduler(id="s1")
    drive(clock, [scheduler], START + 60 * 60)
    history = app.schedules.history("h")
    assert len(history) == app.settings.retention.history_max  # bounded
    newest = history[0]
    assert newest == {
        "fire_at": START + 3600,
        "job_id": f"sched:h:{int((START + 3600) * 1000)}",
        "outcome": "enqueued",
        "at": START + 3600,
        "scheduler": "s1",
    }


def test_bad_arguments_are_recorded_as_errors_not_retried(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("big", "noop", "* * * * *", args=["x" * (2 * 1024 * 1024)])
    clock.set(START + 60)
    assert app.scheduler().tick() == 0
    (entry,) = app.schedules.history("big")
    assert entry["outcome"] == "error" and "payload" in entry["error"]
    assert app.schedules.get("big").next_fire_at == START + 120  # moved on


def test_months_long_outage_is_cheap_and_runs_once(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("m", "noop", "* * * * *", misfire_grace=0)
    app.schedule_cron("s", "noop", "* * * * *", misfire="skip", misfire_grace=0)
    app.schedule_cron("i", "noop", every=1, misfire="skip", misfire_grace=0)
    clock.set(START + 200 * 86400 + 30)
    assert app.scheduler().tick() == 1  # "m" catches up once; "s" and "i" skip
    assert fire_times(app) == [START + 200 * 86400]
    (entry,) = [e for e in app.schedules.history("m") if e["outcome"] == "skipped-misfire"]
    assert entry["missed"] >= 999 and entry["missed_at_least"]  # cron counts stop at 1000
    (entry,) = [e for e in app.schedules.history("i") if e["outcome"] == "skipped-misfire"]
    assert entry["missed"] == 200 * 86400 + 30  # interval counts are exact


@pytest.mark.parametrize("outage", [75, 600, 86400])  # the oldest due tick > 60 s late
def test_run_once_after_an_outage_enqueues_exactly_one_then_resumes_the_cadence(
    app: Conveyor, clock: FakeClock, outage: int
) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("e", "noop", every=2)
    scheduler = app.scheduler()
    drive(clock, [scheduler], START + 10, step=1)
    before = len(fire_times(app))
    clock.set(START + 10 + outage)  # the scheduler was down for ``outage`` seconds
    assert app.scheduler().tick() == 1  # one catch-up run, not one per tick inside the grace
    assert len(fire_times(app)) == before + 1
    latest = START + 10 + outage - outage % 2  # the latest due tick
    assert max(fire_times(app)) == latest
    assert app.schedules.get("e").next_fire_at == latest + 2  # the cadence resumes from now
    drive(clock, [scheduler], START + 10 + outage + 10, step=1)
    assert len(fire_times(app)) == before + 1 + 5  # then every 2 s again


def test_skip_after_an_outage_enqueues_nothing_due(app: Conveyor, clock: FakeClock) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("e", "noop", every=2, misfire="skip")
    drive(clock, [app.scheduler()], START + 10, step=1)
    before = len(fire_times(app))
    clock.set(START + 610)
    assert app.scheduler().tick() == 0
    assert len(fire_times(app)) == before
    assert app.schedules.get("e").next_fire_at == START + 612
