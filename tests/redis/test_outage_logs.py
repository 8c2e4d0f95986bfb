"""Issue 20: a Redis outage is logged once with the error, then once on recovery with the
retry count and duration; never a traceback per retry (it was ~1/s from the scheduler)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import Conveyor

OUTAGE = 4.0  # seconds Redis stays down: ~4 scheduler retries per plugin, ~8 worker claims


def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_outage_logged_once_then_recovery(
    make_server: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server()
    app = Conveyor(server.url)
    done: list[int] = []

    @app.task
    def note(i: int) -> None:
        done.append(i)

    app.schedule_cron("tick", "note", every=1, args=[0])
    scheduler = app.scheduler(interval=0.05)
    worker = app.worker(queues=["default"], concurrency=2)
    threads = [threading.Thread(target=t.run, daemon=True) for t in (scheduler, worker)]
    for thread in threads:
        thread.start()
    app.enqueue("note", args=[1])
    _until(lambda: 1 in done, "the first job ran")
    conveyor_records = lambda: [r for r in caplog.records if r.name.startswith("conveyor")]  # noqa: E731
    with caplog.at_level(logging.INFO):
        caplog.clear()
        server.stop()
        _until(
            lambda: any("lost the connection" in r.getMessage() for r in caplog.records),
            "the outage was noticed",
        )
        time.sleep(OUTAGE)
        during = [r for r in conveyor_records() if r.levelno >= logging.WARNING]
        server.start()
        _until(
            lambda: any("reconnected" in r.getMessage() for r in caplog.records),
            "the recovery was logged",
            timeout=30,
        )
        app.enqueue("note", args=[2])
        _until(lambda: 2 in done, "jobs run again after the outage", timeout=30)
    lines = [r.getMessage() for r in during]
    assert [r for r in during if r.exc_info] == [], lines  # no traceback during the outage
    assert sum("lost the connection" in m for m in lines) == 1, lines
    assert len(during) <= 3, lines  # the loss line (plus at most a reminder or two)
    recovered = [r.getMessage() for r in caplog.records if "reconnected" in r.getMessage()]
    assert len(recovered) == 1 and "retries" in recovered[0] and " s" in recovered[0]
    scheduler.stop()
    worker.stop(timeout=5)
    for thread in threads:
        thread.join(10)
    app.close()
