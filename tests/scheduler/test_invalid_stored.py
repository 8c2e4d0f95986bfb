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
    ],
    ids=["every", "next_fire_at", "misfire_grace", "args", "misfire", "rev"],
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
    field = next(iter(bad))
    assert field in line.getMessage()
