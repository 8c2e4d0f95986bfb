"""The scheduler's duties are plugins with one interface (``tick(now) -> next_due``): the built-in
ones are listed by name, a user's plugin is ticked at the time it asks for, and the loop sleeps
until the earliest plugin is due."""

from __future__ import annotations

import threading
import time

import pytest

from conveyor import Conveyor, FakeClock, ValidationError
from conveyor.broker.base import Broker
from conveyor.scheduler import Plugin

from .support import ts

START = ts(2024, 6, 1, 10, 0)


class Every(Plugin):
    """Asks to run every ``period`` seconds; records when it ran, started and stopped."""

    name = "every"

    def __init__(self, period: float) -> None:
        self.period = period
        self.ticks: list[float] = []
        self.started: list[float] = []
        self.stopped = 0

    def start(self, now: float) -> None:
        self.started.append(now)

    def tick(self, now: float) -> float | None:
        self.ticks.append(now)
        return now + self.period

    def stop(self) -> None:
        self.stopped += 1


def test_builtin_duties_are_plugins(app: Conveyor) -> None:
    scheduler = app.scheduler()
    assert [p.name for p in scheduler.plugins] == ["promote", "reap", "cron", "alerts"]


def test_a_custom_plugin_is_ticked_at_its_next_due(app: Conveyor, clock: FakeClock) -> None:
    plugin = Every(10)
    scheduler = app.scheduler(plugins=[plugin])
    assert scheduler.plugins[-1] is plugin
    for offset in (0, 1, 9.999, 10, 15, 20, 20, 31):
        clock.set(START + offset)
        scheduler.tick()
    assert plugin.ticks == [START, START + 10, START + 20, START + 31]
    assert plugin.started == [START]  # started once, by the first tick


def test_a_failing_plugin_does_not_stop_the_others(app: Conveyor, clock: FakeClock) -> None:
    class Broken(Plugin):
        name = "broken"

        def tick(self, now: float) -> float | None:
            raise RuntimeError("boom")

    plugin = Every(1)
    scheduler = app.scheduler(plugins=[Broken(), plugin])
    clock.set(START)
    scheduler.tick()
    clock.set(START + 1)
    scheduler.tick()
    assert plugin.ticks == [START, START + 1]


def test_the_loop_sleeps_until_the_earliest_plugin_is_due(broker: Broker) -> None:
    app = Conveyor(broker)  # real clock: the loop waits in real time
    plugin = Every(0.05)
    scheduler = app.scheduler(interval=30, plugins=[plugin])
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(plugin.ticks) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    scheduler.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert len(plugin.ticks) >= 5  # with interval=30 only a plugin's next_due can wake it
    assert plugin.stopped == 1


def test_a_plugin_must_be_a_plugin(app: Conveyor) -> None:
    class Duck:
        name = "duck"

        def tick(self, now: float) -> float | None:
            return None

    with pytest.raises(ValidationError) as info:
        app.scheduler(plugins=[Duck()])  # type: ignore[list-item]
    assert info.value.field == "plugins"


@pytest.mark.parametrize("bad", ["soon", float("nan"), [1], True])
def test_a_plugin_returning_a_bad_next_time_does_not_stop_the_others(
    app: Conveyor, clock: FakeClock, bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    """``tick`` returning a string made every later pass raise a TypeError before any plugin
    ran (promote, reap and cron stopped); NaN made the loop spin every 10 ms. Such a value is
    logged once and read as None (the next pass)."""

    class Odd(Plugin):
        name = "odd"

        def __init__(self) -> None:
            self.ticks = 0

        def tick(self, now: float) -> float | None:
            self.ticks += 1
            return bad  # type: ignore[return-value]

    odd, every = Odd(), Every(1)
    scheduler = app.scheduler(plugins=[odd, every])
    for offset in (0, 1, 2):
        clock.set(START + offset)
        scheduler.tick()
    assert every.ticks == [START, START + 1, START + 2] and odd.ticks == 3
    assert scheduler._sleep_time() >= 0.01
    assert len([r for r in caplog.records if "odd" in r.getMessage()]) == 1


def test_run_stops_the_plugins_when_it_ends_by_an_error(broker: Broker) -> None:
    """``run()`` ending by a ``BrokerConfigError`` (a wrong password: it stops for good) never
    called the plugins' ``stop()``: a plugin holding a connection or a thread leaked it."""
    from conveyor.errors import BrokerConfigError

    class Refused(Plugin):
        name = "refused"

        def tick(self, now: float) -> float | None:
            raise BrokerConfigError("authentication failed")

    app = Conveyor(broker)
    watcher = Every(60)
    scheduler = app.scheduler(plugins=[watcher, Refused()])
    with pytest.raises(BrokerConfigError):
        scheduler.run()
    assert watcher.stopped == 1


def test_plugins_that_are_not_a_list_are_refused_by_name(app: Conveyor) -> None:
    """``plugins=5`` (or one plugin not in a list) was a raw TypeError."""
    for bad in (5, None):
        with pytest.raises(ValidationError) as info:
            app.scheduler(plugins=bad)  # type: ignore[arg-type]
        assert info.value.field == "plugins"
