"""A heartbeat that fails for a reason that is not an outage logs one traceback per streak of
failures, then one line when it works again (as the lease keeper does), not a traceback per beat.

A worker record that cannot be built or stored (here: its ``describe()`` raises) used to write a
full traceback every ``heartbeat_interval``, for as long as the worker ran.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from conveyor.broker.base import Broker
from conveyor.core.clock import FakeClock
from conveyor.worker.presence import Heartbeat


class Record:
    """The worker's ``describe()``: raises until ``fixed``."""

    def __init__(self) -> None:
        self.fixed = False

    def __call__(self) -> dict[str, Any]:
        if not self.fixed:
            raise RuntimeError("cannot describe this worker")
        return {"id": "w-1"}


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "conveyor.worker" and "heartbeat" in r.msg]


def test_one_traceback_per_streak_of_failed_beats(
    broker: Broker, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    record = Record()
    beat = Heartbeat(broker, "w-1", clock.now, record, 5.0, on_command=lambda _: None)
    with caplog.at_level(logging.INFO, logger="conveyor.worker"):
        for _ in range(5):
            beat.publish()
            clock.advance(5.0)
        failed = _lines(caplog)
        assert len(failed) == 1, [r.getMessage() for r in failed]
        assert failed[0].exc_info is not None and failed[0].levelno == logging.WARNING
        caplog.clear()
        record.fixed = True
        beat.publish()
        beat.publish()
        back = _lines(caplog)
        assert [r.getMessage() for r in back] == [
            "heartbeat: publishing the worker record works again after 5 failure(s)"
        ]
        assert broker.docs.get("workers", "w-1", clock.now()) is not None
        caplog.clear()
        record.fixed = False
        beat.publish()  # a new streak: its traceback is logged again
        assert len(_lines(caplog)) == 1
    beat.stop()
