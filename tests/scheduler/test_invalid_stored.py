"""A stored schedule that is no longer valid is skipped by schedulers with ONE log line.

docs/scheduling.md: such a schedule (written by an older version, another client or by hand)
"is skipped by schedulers ... the others are unaffected". A due one used to raise on every
pass (every 0.5 s) and log a traceback each time, for as long as it stayed stored.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.scheduler.models import COLLECTION

from .support import fire_times, ts

START = ts(2024, 6, 1, 10, 0)


def noop() -> None:
    """A task body."""


@pytest.mark.parametrize(
    "bad",
    [
        {"every": 10**12},  # out of today's range (an older version allowed it)
        {"next_fire_at": "soon"},  # wrong JSON type
        {"misfire_grace": "x"},
        {"args": "oops"},
        {"misfire": "sometimes"},
        {"rev": "7"},
        {"cron": "\x1b[2J * * * *", "every": None},  # croniter's message quotes it raw
    ],
    ids=["every", "next_fire_at", "misfire_grace", "args", "misfire", "rev", "cron"],
)
def test_a_due_invalid_schedule_is_skipped_with_one_line_not_a_traceback_per_pass(
    app: Conveyor, clock: FakeClock, caplog: pytest.LogCaptureFixture, bad: dict[str, Any]
) -> None:
    clock.set(START)
    app.task(noop)
    app.schedule_cron("good", "noop", every=60)
    doc = app.broker.doc_get(COLLECTION, "good", app.now())
    assert doc is not None
    due = {"next_fire_at": START - 1, "name": "odd"}
    app.broker.doc_put(COLLECTION, "odd", {**doc, **due, **bad}, app.now())
    scheduler = app.scheduler()
    caplog.set_level(logging.INFO, logger="conveyor.scheduler")
    for step in range(10):
        clock.set(START + 30 * step)
        scheduler.tick()
    assert fire_times(app) == [START + 60, START + 120, START + 180, START + 240]
    lines = [r for r in caplog.records if "odd" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    (line,) = lines
    assert line.exc_info is None and "invalid" in line.getMessage()
    assert "\x1b" not in line.getMessage()  # one safe line, whatever the document holds
    field = next(iter(bad))
    assert field in line.getMessage()


def test_a_tick_whose_enqueue_keeps_raising_logs_one_traceback_and_is_retried(
    broker: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # a before_enqueue hook that raises (not a ValidationError: not a refusal): the tick is
    # retried on every pass, as before, but the traceback was logged on every pass (twice a
    # second for as long as it lasted); now once, then one line a minute while it lasts
    from conveyor import Middleware, default_middleware

    class Flaky(Middleware):
        down = True

        def before_enqueue(self, app: Any, job: Any) -> None:
            if self.down and job.task == "noop":
                raise RuntimeError("tenant service down")

    flaky = Flaky()
    app = Conveyor(broker, clock=clock, middleware=[*default_middleware(), flaky])
    clock.set(START)
    app.task(noop)
    app.schedule_cron("h", "noop", every=60)
    scheduler = app.scheduler()
    caplog.set_level(logging.INFO, logger="conveyor.scheduler")
    for step in range(1, 301):  # 150 s of passes, failing from the first tick on (START + 60)
        clock.set(START + 0.5 * step)
        scheduler.tick()
    records = [r for r in caplog.records if "'h'" in r.getMessage()]
    assert sum(r.exc_info is not None for r in records) == 1, [r.getMessage() for r in records]
    assert 1 <= len(records) <= 3  # the traceback, then a reminder a minute
    assert fire_times(app) == []
    flaky.down = False
    clock.set(START + 151)
    assert scheduler.tick() == 1  # retried: the tick was kept (misfire policy: run_once)
    assert fire_times(app) == [START + 120]


@pytest.mark.parametrize(
    "stored",
    [
        {"name": "beat"},
        {"name": "beat", "task": "noop", "every": "x"},
        {"name": "beat", "task": "noop", "every": 60},  # no rev: no compare-and-set succeeds
    ],
    ids=["no-task", "bad-every", "no-rev"],
)
def test_a_declared_schedule_replaces_an_invalid_stored_document_of_its_name(
    app: Conveyor, clock: FakeClock, stored: dict[str, Any]
) -> None:
    # the scheduler upserts the code-declared schedules at start: a stored document of the
    # same name without a task raised TypeError there, so start() failed on every pass and
    # NO duty ran (promotion of delayed jobs, lease reaping, every other schedule)
    clock.set(START)
    app.broker.doc_put(COLLECTION, "beat", stored, app.now())
    app.every(60, name="beat")(noop)
    later = app.enqueue("noop", delay=30)
    scheduler = app.scheduler()
    assert scheduler.tick() == 0  # started: the declared schedule is stored
    clock.set(START + 61)
    assert scheduler.tick() == 1  # the declared schedule fired
    assert app.get_job(later.id).state.value == "pending"  # and the delayed job was promoted
    assert app.schedules.get("beat").every == 60
