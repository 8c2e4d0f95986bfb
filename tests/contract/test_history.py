"""Contract: processed / failed history per minute (1 h, 24 h) and per hour (7 d), kept in the
broker with bounded retention, on every backend; it survives a restart (a new app, same store).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock, PermanentError
from conveyor.errors import ValidationError
from conveyor.monitoring.history import read_history
from conveyor.monitoring.metrics import flush_local


def busy_app(app: Conveyor) -> None:
    @app.task(name="ok")
    def ok() -> None:
        return None

    @app.task(name="bad", max_attempts=1)
    def bad() -> None:
        raise PermanentError("no")


def run_some(app: Conveyor, ok: int, bad: int, queue: str = "default") -> None:
    for _ in range(ok):
        app.enqueue("ok", queue=queue)
    for _ in range(bad):
        app.enqueue("bad", queue=queue)
    app.worker(queues=[queue]).run_until_idle()
    flush_local(app)


def test_history_ranges_and_retention(app: Conveyor, clock: FakeClock) -> None:
    busy_app(app)
    clock.set(1_700_000_000.0 - 1_700_000_000.0 % 3600 + 600)  # ten minutes into an hour
    run_some(app, 3, 1)
    run_some(app, 2, 0, queue="mail")
    clock.advance(2 * 3600)
    run_some(app, 4, 2)

    hour = read_history(app.broker, clock.now(), "1h")
    assert hour["step"] == 60 and len(hour["points"]) == 60
    assert (hour["processed"], hour["failed"]) == (6, 2)
    assert hour["points"][-1]["processed"] == 6, "the newest point is the current minute"

    day = read_history(app.broker, clock.now(), "24h")
    assert len(day["points"]) == 1440 and (day["processed"], day["failed"]) == (12, 3)
    mail = read_history(app.broker, clock.now(), "24h", queue="mail")
    assert (mail["processed"], mail["failed"]) == (2, 0)

    week = read_history(app.broker, clock.now(), "7d")
    assert week["step"] == 3600 and len(week["points"]) == 168
    assert (week["processed"], week["failed"]) == (12, 3)
    assert [p["processed"] for p in week["points"] if p["processed"]] == [6, 6]
    assert week["points"][-1]["t"] == clock.now() - clock.now() % 3600

    clock.advance(2 * 86400)  # the minute series keeps a day; the hour series a week
    assert read_history(app.broker, clock.now(), "24h")["processed"] == 0
    assert read_history(app.broker, clock.now(), "7d")["processed"] == 12
    clock.advance(6 * 86400)
    assert read_history(app.broker, clock.now(), "7d")["processed"] == 0
    with pytest.raises(ValidationError, match="range"):
        read_history(app.broker, clock.now(), "1y")


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_history_survives_a_restart(
    store: str, tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest
) -> None:
    if store == "sqlite":
        url = f"sqlite:///{tmp_path / 'h.db'}"
    else:
        pytest.importorskip("psycopg")
        url = request.getfixturevalue("pg_server").new_database()
    first = Conveyor(url, clock=clock, rng=random.Random(1))
    busy_app(first)
    run_some(first, 5, 2)
    first.close()
    second = Conveyor(url, clock=clock, rng=random.Random(2))
    day = read_history(second.broker, clock.now(), "24h")
    assert (day["processed"], day["failed"]) == (7, 2)
    second.close()
