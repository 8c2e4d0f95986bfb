"""Jobs released unfinished at shutdown are counted by the metrics (``released``)."""

from __future__ import annotations

import threading

from conveyor import Conveyor, JobState
from conveyor.monitoring.inspect import Inspector
from conveyor.monitoring.metrics import flush_local, read_totals
from tests.worker.conftest import running, wait_until


def test_jobs_released_at_shutdown_are_counted(live_app: Conveyor) -> None:
    app = live_app
    started, gate = threading.Event(), threading.Event()

    @app.task
    def slow() -> None:
        started.set()
        gate.wait(10)

    job = slow.enqueue()
    with running(app, shutdown_timeout=0.2):
        assert started.wait(10)
    gate.set()
    wait_until(lambda: job.refresh().state is JobState.PENDING)
    flush_local(app)
    totals = read_totals(app.broker, app.now())
    counters = totals[f"{job.queue}|slow"]
    assert counters.get("released") == 1.0
    assert not counters.get("processed")  # a released job did not finish
    assert Inspector(app).metrics(minutes=5)["summary"]["released"] == 1
