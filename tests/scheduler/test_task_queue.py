"""A schedule's ticks go to its task's queue, also from a scheduler that does not register it.

A schedule without its own ``queue=`` stored nothing about the task's queue, so a scheduler
process that did not import the task (a separate ``conveyor scheduler`` deployment, a run-time
schedule made by name) enqueued its ticks to ``default``, where no worker of that task
listens. The task's queue is now stored with the schedule (``task_queue``) when the declaring
process knows the task, and used when the enqueuing process does not; documents stored before
(no ``task_queue``) are read as before.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, ValidationError
from conveyor.broker.base import Broker
from conveyor.scheduler.models import COLLECTION, stored_schedule
from tests.support.hostile import BAD_NAMES

from .support import ts

START = ts(2024, 6, 1, 10, 0)


def report() -> str:
    """A task body."""
    return "ok"


def _apps(broker: Broker, clock: FakeClock) -> tuple[Conveyor, Conveyor]:
    """The app of the code (declares the task) and a scheduler-only app on the same broker."""
    code = Conveyor(broker, clock=clock, rng=random.Random(1))
    bare = Conveyor(broker, clock=clock, rng=random.Random(2))
    return code, bare


def test_a_code_schedule_ticks_to_its_tasks_queue_from_a_scheduler_without_the_task(
    broker: Broker, clock: FakeClock
) -> None:
    code, bare = _apps(broker, clock)
    clock.set(START)
    task = code.task(report, queue="reports")
    code.every(60, name="digest")(task)
    code.schedules.sync(START)  # the code's process stored it (e.g. its scheduler ran once)
    assert "report" not in bare.tasks
    clock.set(START + 61)
    assert bare.scheduler(sync=False).tick() == 1
    [job] = [j for q in ("default", "reports") for j in bare.peek(q)]
    assert job.queue == "reports"


def test_a_runtime_schedule_by_name_stores_the_known_tasks_queue(
    broker: Broker, clock: FakeClock
) -> None:
    code, bare = _apps(broker, clock)
    clock.set(START)
    code.task(report, queue="reports")
    code.schedule_cron("hourly", "report", every=3600)
    clock.set(START + 3601)
    assert bare.scheduler(sync=False).tick() == 1
    assert [j.queue for j in bare.peek("reports")] == ["reports"]
    assert bare.peek("default") == []


def test_a_schedules_own_queue_still_wins(broker: Broker, clock: FakeClock) -> None:
    code, bare = _apps(broker, clock)
    clock.set(START)
    task = code.task(report, queue="reports")
    code.every(60, name="digest", queue="urgent")(task)
    code.schedules.sync(START)
    clock.set(START + 61)
    bare.scheduler(sync=False).tick()
    assert len(bare.peek("urgent")) == 1


def test_an_old_document_without_the_tasks_queue_still_fires_to_default(
    broker: Broker, clock: FakeClock
) -> None:
    code, bare = _apps(broker, clock)
    clock.set(START)
    code.task(report, queue="reports")
    code.every(60, name="digest")(code.tasks["report"])
    code.schedules.sync(START)
    doc = dict(broker.docs.get(COLLECTION, "digest", START) or {})
    del doc["task_queue"]  # as stored by an older version
    broker.docs.put(COLLECTION, "digest", doc, START)
    assert stored_schedule(doc).task_queue is None
    clock.set(START + 61)
    assert bare.scheduler(sync=False).tick() == 1
    assert len(bare.peek("default")) == 1  # what it knows: as Celery beat does
    assert code.scheduler().tick() == 0  # the code's scheduler re-stores it (sync) ...
    assert (broker.docs.get(COLLECTION, "digest", START) or {})["task_queue"] == "reports"


@pytest.mark.parametrize("bad", [*BAD_NAMES.values(), 5, ["reports"]], ids=repr)
def test_a_stored_task_queue_that_is_not_a_queue_name_makes_the_schedule_invalid(
    broker: Broker, clock: FakeClock, bad: Any
) -> None:
    code, bare = _apps(broker, clock)
    clock.set(START)
    code.every(60, name="digest")(code.task(report, queue="reports"))
    code.schedules.sync(START)
    doc = dict(broker.docs.get(COLLECTION, "digest", START) or {})
    doc["task_queue"] = bad
    broker.docs.put(COLLECTION, "digest", doc, START)
    good, invalid = bare.schedules.scan()
    assert good == [] and "task_queue" in invalid["digest"]
    with pytest.raises(ValidationError):
        bare.schedules.next_runs("digest")
