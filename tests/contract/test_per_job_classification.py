"""Contract: ``retry_on`` / ``dead_on`` are per task and overridable per job (by type or name)."""

from __future__ import annotations

import random

import pytest

from conveyor import Conveyor, FakeClock, JobState, ValidationError
from conveyor.broker.base import Broker


class Flaky(Exception):
    """Raised by the tasks below."""


def test_dead_on_per_job_makes_an_error_permanent(app: Conveyor) -> None:
    @app.task(max_attempts=3)
    def boom() -> None:
        raise KeyError("gone")

    handle = boom.options(dead_on=(LookupError,)).enqueue()
    assert app.worker().process_next()
    job = handle.refresh()
    assert job.state is JobState.DEAD_LETTER and job.errors[-1]["kind"] == "permanent"
    other = boom.enqueue()  # without the override the task's policy applies: retried
    assert app.worker().process_next()
    assert other.refresh().state is JobState.RETRY_SCHEDULED


def test_retry_on_per_job_makes_an_error_retryable(app: Conveyor) -> None:
    @app.task(max_attempts=3, retry_on=(ConnectionError,))
    def boom() -> None:
        raise Flaky("try later")

    handle = boom.options(retry_on=[Flaky]).enqueue()
    assert app.worker().process_next()
    assert handle.refresh().state is JobState.RETRY_SCHEDULED
    plain = boom.enqueue()
    assert app.worker().process_next()
    assert plain.refresh().state is JobState.DEAD_LETTER


def test_overrides_by_qualified_name_from_a_producer_without_the_task(
    broker: Broker, clock: FakeClock
) -> None:
    producer = Conveyor(broker, clock=clock)
    name = f"{Flaky.__module__}.{Flaky.__qualname__}"
    handle = producer.enqueue("boom_by_name", retry_on=["builtins.ConnectionError", name])
    stored = broker.get(handle.id)
    assert stored is not None and stored.retry_on == ["builtins.ConnectionError", name]
    worker_app = Conveyor(broker, clock=clock, rng=random.Random(1))

    @worker_app.task(name="boom_by_name", max_attempts=3, retry_on=(OSError,))
    def boom() -> None:
        raise Flaky("try later")

    assert worker_app.worker().process_next()
    assert handle.refresh().state is JobState.RETRY_SCHEDULED


@pytest.mark.parametrize("field", ["retry_on", "dead_on"])
@pytest.mark.parametrize("bad", [42, [int], ["not a name!"], [""], "builtins.ValueError"])
def test_bad_overrides_are_refused_naming_the_field(app: Conveyor, field: str, bad: object) -> None:
    with pytest.raises(ValidationError) as info:
        app.enqueue("t", **{field: bad})
    assert info.value.field == field
    assert app.search().total == 0
