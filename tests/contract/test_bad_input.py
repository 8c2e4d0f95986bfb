"""Bad input: a clear ValidationError naming the field and the rule; nothing partial stored;
hostile jobs land in dead letter with a reason while the worker keeps running."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from conveyor import Conveyor, JobState, PayloadTooLarge, ValidationError
from tests.support.hostile import UNENCODABLE


def assert_nothing_stored(app: Conveyor) -> None:
    assert app.search().total == 0


@pytest.mark.parametrize(("kwargs", "field", "rule"), [
    ({"task": ""}, "task", "non-empty"),
    ({"task": "has space"}, "task", "identifier"),
    ({"task": "a" * 300}, "task", "200"),
    ({"task": "x;rm -rf"}, "task", "identifier"),
    ({"args": [object()]}, "args[0]", "object"),
    ({"kwargs": {"when": {1, 2}}}, "kwargs['when']", "set"),
    ({"delay": -1}, "delay", ">= 0"),
    ({"priority": 1.5}, "priority", "integer"),
    ({"priority": "high"}, "priority", "integer"),
    ({"max_attempts": 0}, "max_attempts", ">= 1"),
    ({"max_retries": -1}, "max_retries", ">= 0"),
    ({"queue": ""}, "queue", "non-empty"),
    ({"queue": "has space"}, "queue", "no spaces"),
    ({"queue": "{braces}"}, "queue", "braces"),
    ({"queue": "a:b"}, "queue", "colons"),
    ({"queue": "line\nbreak"}, "queue", "letters"),
    ({"queue": "q" * 101}, "queue", "1-100"),
    ({"run_at": dt.datetime(2030, 1, 1)}, "run_at", "timezone-aware"),
    ({"bogus_option": 1}, "options", "unknown option"),
    ({"args": "not-a-list"}, "args", "must be a list"),
])  # fmt: skip
def test_enqueue_refuses_with_field_and_rule(app: Conveyor, kwargs: dict[str, Any], field: str,
                                             rule: str) -> None:  # fmt: skip
    call = {"task": "valid_task", **kwargs}
    with pytest.raises(ValidationError) as info:
        app.enqueue(call.pop("task"), **call)
    assert field in str(info.value) and rule in str(info.value), str(info.value)
    assert_nothing_stored(app)


def test_payload_over_one_mib(app: Conveyor) -> None:
    with pytest.raises(PayloadTooLarge, match="limit"):
        app.enqueue("t", kwargs={"blob": "x" * (1024 * 1024)})
    assert_nothing_stored(app)


def test_unknown_url_scheme() -> None:
    with pytest.raises(ValidationError, match=r"url.*unknown scheme 'ftp'"):
        Conveyor("ftp://example")
    with pytest.raises(ValidationError, match="url"):
        Conveyor("no-scheme-here")


def test_task_decorator_validates() -> None:
    app = Conveyor("memory://")

    def job() -> None:
        """A valid task function."""

    with pytest.raises(ValidationError, match="max_attempts"):
        app.task(max_attempts=0)(job)
    with pytest.raises(ValidationError, match="queue"):
        app.task(queue="bad queue")(job)
    with pytest.raises(ValidationError, match="executor"):
        app.task(executor="gpu")(job)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="task"):
        app.task(lambda: None)


def test_hostile_jobs_dead_letter_and_the_worker_survives(app: Conveyor) -> None:
    ran: list[str] = []

    @app.task
    def victim(x: int) -> None:
        ran.append(f"victim {x}")

    import_path = app.enqueue("os.system", args=["echo pwned"])
    unknown = app.enqueue("never.registered")
    wrong_args = app.enqueue("victim", args=[1, 2, 3])
    script = app.enqueue("victim", args=["<script>alert(1)</script>"])  # fits; runs harmlessly
    good = victim.enqueue(7)
    assert app.worker().run_until_idle() == 5
    for job, kind in [(import_path, "unknown_task"), (unknown, "unknown_task"),
                      (wrong_args, "bad_arguments")]:  # fmt: skip
        job.refresh()
        assert job.state is JobState.DEAD_LETTER and job.errors[-1]["kind"] == kind
    assert good.refresh().state is JobState.COMPLETED
    assert script.refresh().state is JobState.COMPLETED
    assert ran == ["victim <script>alert(1)</script>", "victim 7"]


@pytest.mark.parametrize("name", sorted(UNENCODABLE))
def test_low_level_ack_refuses_a_result_that_cannot_be_stored(app: Conveyor, name: str) -> None:
    """``Delivery.ack(result)``: ValidationError naming ``result``; the lease stays usable."""
    job = app.enqueue("t")
    delivery = app.dequeue("default")
    assert delivery is not None
    with pytest.raises(ValidationError, match=r"^result"):
        delivery.ack(UNENCODABLE[name])
    assert job.refresh().state is JobState.ACTIVE
    delivery.ack("fine")
    assert job.refresh().result == "fine"
