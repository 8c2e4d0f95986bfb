"""Any number of schedulers, no leader: every tick becomes exactly one job."""

from __future__ import annotations

import random
import threading

from conveyor import Conveyor, FakeClock

from .support import fire_times, jobs, outcomes, per_fire, ts


def noop() -> None:
    """A task body."""


def test_three_schedulers_sixty_minutes_interleaved(app: Conveyor, clock: FakeClock) -> None:
    start = ts(2024, 6, 1, 8, 0)
    clock.set(start)
    app.cron("* * * * *", name="minutely")(noop)
    schedulers = [app.scheduler() for _ in range(3)]
    # Each scheduler ticks on its own cadence and phase; merge them into one timeline.
    rng = random.Random(7)
    events: list[tuple[float, int]] = []
    for index, period in enumerate((7.0, 11.0, 13.0)):
        t = start + rng.uniform(0, period)
        while t <= start + 3620:  # past 09:00 (the 60th tick), before 09:01
            events.append((t, index))
            t += period
    enqueued = 0
    for t, index in sorted(events):
        clock.set(t)
        enqueued += schedulers[index].tick()
    assert enqueued == 60
    counts = per_fire(app)
    assert sorted(counts) == [start + 60 * k for k in range(1, 61)]
    assert set(counts.values()) == {1}
    assert sum(s.enqueued for s in schedulers) == 60
    assert all(s.enqueued > 0 for s in schedulers)  # the work really was shared


def test_a_scheduler_with_a_stale_view_records_a_duplicate(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 6, 1, 8, 0))
    app.task(noop)
    app.schedule_cron("minutely", "noop", "* * * * *")
    first, second = app.scheduler(), app.scheduler()
    stale = app.schedules.get("minutely")  # both read the schedule before either advances it
    clock.set(ts(2024, 6, 1, 8, 1))
    assert first.fire(stale, clock.now())[0] == 1
    assert second.fire(stale, clock.now())[0] == 0  # same deterministic id: DuplicateJob
    assert len(jobs(app)) == 1
    assert outcomes(app, "minutely") == ["enqueued", "duplicate"]
    # The stale compare-and-set lost, so the schedule advanced exactly once.
    schedule = app.schedules.get("minutely")
    assert schedule.next_fire_at == ts(2024, 6, 1, 8, 2)
    assert schedule.last_job_id == f"sched:minutely:{int(ts(2024, 6, 1, 8, 1) * 1000)}"


def test_killed_between_enqueue_and_advance_loses_nothing(app: Conveyor, clock: FakeClock) -> None:
    clock.set(ts(2024, 6, 1, 8, 0))
    app.task(noop)
    app.schedule_cron("minutely", "noop", "* * * * *")
    doomed, survivor = app.scheduler(), app.scheduler()
    clock.set(ts(2024, 6, 1, 8, 1) + 5)
    schedule = app.schedules.get("minutely")
    doomed._enqueue(schedule, ts(2024, 6, 1, 8, 1), clock.now())  # enqueued, then "killed -9"
    assert app.schedules.get("minutely").next_fire_at == ts(2024, 6, 1, 8, 1)  # not advanced
    assert survivor.tick() == 0  # re-enqueues the same id: duplicate, then advances
    clock.set(ts(2024, 6, 1, 8, 2) + 1)
    assert survivor.tick() == 1
    assert fire_times(app) == [ts(2024, 6, 1, 8, 1), ts(2024, 6, 1, 8, 2)]


def test_concurrent_threads_never_double_a_tick(app: Conveyor, clock: FakeClock) -> None:
    start = ts(2024, 6, 1, 8, 0)
    clock.set(start)
    app.every(10, name="ten")(noop)
    schedulers = [app.scheduler() for _ in range(4)]
    for scheduler in schedulers:
        scheduler.start()
    errors: list[BaseException] = []
    for step in range(1, 31):
        clock.set(start + 10 * step)
        barrier = threading.Barrier(len(schedulers))

        def run(scheduler: object, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait(timeout=10)
                scheduler.tick()  # type: ignore[attr-defined]
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,)) for s in schedulers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors
    counts = per_fire(app)
    assert sorted(counts) == [start + 10 * k for k in range(1, 31)]
    assert set(counts.values()) == {1}
    assert sum(s.enqueued for s in schedulers) == 30
