"""Contract: the worker control flag (quiet / stop) on every backend, and a worker honouring it.

The flag is a side-store document the worker's heartbeat reads (``worker/control.py``); the
running-worker test drives a real ``Worker.run()`` thread on each backend with a short
heartbeat and checks it goes quiet (claims nothing new, finishes what runs) and then stops.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.broker.base import Broker
from conveyor.config import Settings
from conveyor.errors import ValidationError
from conveyor.worker import control
from conveyor.worker.presence import Heartbeat


def wait_for(pred: Any, timeout: float = 10.0) -> Any:
    """Poll until ``pred()`` is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
    return value


def test_control_flag_round_trip(broker: Broker, clock: FakeClock) -> None:
    now = clock.now()
    assert control.read(broker, "w-1", now) is None
    assert control.send(broker, "w-1", "quiet", now, by="alice") == "quiet"
    assert control.read(broker, "w-1", now) == "quiet"
    assert control.read(broker, "w-2", now) is None, "a command is for one worker only"
    assert control.send(broker, "w-1", "stop", now) == "stop"
    assert control.send(broker, "w-1", "quiet", now) == "stop", "quiet never weakens a stop"
    assert control.read(broker, "w-1", now) == "stop"
    control.clear(broker, "w-1")
    assert control.read(broker, "w-1", now) is None
    control.send(broker, "w-3", "quiet", now)
    assert control.read(broker, "w-3", now + control.CONTROL_TTL + 1) is None, "expires"
    with pytest.raises(ValidationError, match="command"):
        control.send(broker, "w-1", "explode", now)


def test_heartbeat_hands_the_command_to_the_worker(broker: Broker, clock: FakeClock) -> None:
    seen: list[str] = []
    beat = Heartbeat(broker, "w-1", clock.now, lambda: {"id": "w-1"}, 5.0, on_command=seen.append)
    beat.publish()
    assert seen == []
    control.send(broker, "w-1", "quiet", clock.now())
    beat.publish()
    assert seen == ["quiet"]
    beat.stop()
    assert control.read(broker, "w-1", clock.now()) is None, "an exiting worker clears its flag"


def test_a_running_worker_goes_quiet_then_stops(broker: Broker) -> None:
    app = Conveyor(broker, settings=Settings(heartbeat_interval=0.2), rng=random.Random(7))
    gate = threading.Event()

    @app.task(name="held")
    def held() -> None:
        gate.wait(10)

    running = app.enqueue("held")
    worker = app.worker(concurrency=2, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: running.refresh().state is JobState.ACTIVE)
        control.send(broker, worker.id, "quiet", app.now())
        wait_for(lambda: app.workers() and app.workers()[0].get("state") == "quiet", 5.0)
        late = app.enqueue("held")
        time.sleep(0.6)  # three heartbeats: a quiet worker claims nothing
        assert late.refresh().state is JobState.PENDING
        assert thread.is_alive(), "quiet is not stop"
        gate.set()
        wait_for(lambda: running.refresh().state is JobState.COMPLETED)
        control.send(broker, worker.id, "stop", app.now())
        thread.join(5.0)
        assert not thread.is_alive(), "stop ends run() within a heartbeat and a drain"
        assert late.refresh().state is JobState.PENDING
        assert app.workers() == []
    finally:
        gate.set()
        worker.stop(timeout=1.0)
        thread.join(5.0)
