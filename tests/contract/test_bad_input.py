"""Bad input: a clear ValidationError naming the field and the rule; nothing partial stored;
hostile jobs land in dead letter with a reason while the worker keeps running."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from conveyor import Conveyor, JobState, PayloadTooLarge, ValidationError
from conveyor.monitoring.actions import Operator
from tests.support.hostile import BAD_NAMES, UNENCODABLE, deep_list


def assert_nothing_stored(app: Conveyor) -> None:
    assert app.search().total == 0


@pytest.mark.parametrize(
    ("kwargs", "field", "rule"),
    [
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
    ],
)
def test_enqueue_refuses_with_field_and_rule(
    app: Conveyor, kwargs: dict[str, Any], field: str, rule: str
) -> None:
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

    other = Conveyor(app.broker, clock=app.clock)  # a producer that only knows names
    import_path = other.enqueue("os.system", args=["echo pwned"])
    unknown = other.enqueue("never.registered")
    wrong_args = other.enqueue("victim", args=[1, 2, 3])
    script = app.enqueue("victim", args=["<script>alert(1)</script>"])  # fits; runs harmlessly
    good = victim.enqueue(7)
    assert app.worker().run_until_idle() == 5
    for job, kind in [
        (import_path, "unknown_task"),
        (unknown, "unknown_task"),
        (wrong_args, "bad_arguments"),
    ]:
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


# ---------------------------------------------------------------------- issue 13: hostile input
# Every field that holds a name or an id refuses what BAD_NAMES holds (a trailing newline used to
# slip past "$" in the regexes); idempotency keys never appear in paths, so "/" is fine there.
NAME_FIELDS = ["queue", "task", "job_id", "idempotency_key"]


@pytest.mark.parametrize("field", NAME_FIELDS)
@pytest.mark.parametrize("bad", sorted(BAD_NAMES))
def test_bad_names_are_refused(app: Conveyor, field: str, bad: str) -> None:
    if field == "idempotency_key" and bad == "slash":
        pytest.skip("'/' is allowed in idempotency keys")
    value = BAD_NAMES[bad]
    with pytest.raises(ValidationError) as info:
        if field == "task":
            app.enqueue(value)
        else:
            app.enqueue("t", **{field: value})
    assert info.value.field == field, str(info.value)
    assert_nothing_stored(app)


@pytest.mark.parametrize("job_id", [".", ".."])
def test_dot_segment_ids_are_refused(app: Conveyor, job_id: str) -> None:
    """Browsers and HTTP clients resolve ``.``/``..`` path segments: such a job has no URL."""
    with pytest.raises(ValidationError, match=r"job_id.*'\.\.'"):
        app.enqueue("t", job_id=job_id)
    assert_nothing_stored(app)


@pytest.mark.parametrize("bad", sorted(BAD_NAMES))
def test_bad_schedule_names_are_refused(app: Conveyor, bad: str) -> None:
    with pytest.raises(ValidationError) as info:
        app.schedule_cron(BAD_NAMES[bad], "t", "* * * * *")
    assert info.value.field == "name"
    assert app.list_schedules() == []


@pytest.mark.parametrize("bad", sorted(BAD_NAMES))
def test_bad_queue_names_refused_by_task_and_admin_calls(app: Conveyor, bad: str) -> None:
    def job() -> None:
        """A valid task function."""

    with pytest.raises(ValidationError, match="queue"):
        app.task(queue=BAD_NAMES[bad])(job)
    with pytest.raises(ValidationError, match="queue"):
        Operator(app, "test").pause_queue(BAD_NAMES[bad])


SURROGATE = UNENCODABLE["lone_surrogate"]
HOSTILE_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"run_at": float("nan")}, "run_at"),
    ({"run_at": float("inf")}, "run_at"),
    ({"run_at": float("-inf")}, "run_at"),
    ({"run_at": "tomorrow"}, "run_at"),
    ({"delay": float("nan")}, "delay"),
    ({"idempotency_ttl": -1}, "idempotency_ttl"),
    ({"idempotency_ttl": "300"}, "idempotency_ttl"),
    ({"idempotency_ttl": float("nan")}, "idempotency_ttl"),
    ({"max_attempts": 2**64}, "max_attempts"),
    ({"max_attempts": 10**7}, "max_attempts"),
    ({"args": [SURROGATE]}, "args[0]"),
    ({"args": ["ok", {"k": [SURROGATE]}]}, "args[1]['k'][0]"),
    ({"kwargs": {"name": SURROGATE}}, "kwargs['name']"),
    ({"kwargs": {SURROGATE: 1}}, "kwargs"),
    ({"args": [deep_list(300)]}, "args"),
    ({"args": [deep_list(600)]}, "args"),
    ({"kwargs": {"tree": deep_list(600)}}, "kwargs"),
    ({"args": [2**64]}, "args[0]"),
    ({"metadata": {"m": SURROGATE}}, "metadata"),
    ({"metadata": {"m": deep_list(600)}}, "metadata"),
    ({"job_id": SURROGATE}, "job_id"),
    ({"idempotency_key": SURROGATE}, "idempotency_key"),
    ({"queue": SURROGATE}, "queue"),
]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    HOSTILE_OPTIONS,
    ids=[f"{f}-{i}" for i, (_, f) in enumerate(HOSTILE_OPTIONS)],
)
def test_values_that_cannot_be_stored_are_refused(
    app: Conveyor, kwargs: dict[str, Any], field: str
) -> None:
    """A ValidationError naming the field (never a bare TypeError / RecursionError), nothing
    stored — with options (the validated path) and, for args/kwargs, without (the fast path)."""
    with pytest.raises(ValidationError) as info:
        app.enqueue("t", **kwargs)
    assert info.value.field.startswith(field), str(info.value)
    if set(kwargs) <= {"args", "kwargs"}:
        with pytest.raises(ValidationError) as info:
            app.enqueue("t", **kwargs, priority=1)
        assert info.value.field.startswith(field), str(info.value)
    assert_nothing_stored(app)


def test_a_bad_job_in_a_batch_stores_nothing(app: Conveyor) -> None:
    from conveyor.task import JobSpec

    bad_id = JobSpec("t", options={"job_id": "x\n"})
    specs = [JobSpec("t", (1,)), JobSpec("t", (SURROGATE,)), bad_id]
    for bad in specs[1:]:
        with pytest.raises(ValidationError):
            app.enqueue_many([specs[0], bad])
    assert_nothing_stored(app)


def test_an_id_with_nul_is_simply_not_found(app: Conveyor) -> None:
    """Operator calls take ids from people and scripts (``POST /jobs/bulk`` ids, the Python
    API). PostgreSQL text cannot hold NUL, so such a job cannot exist there: every call
    answers "not found" as the other backends do (psycopg's DataError escaped as a 500)."""
    b, now, bad = app.broker, app.now(), "a\x00b"
    assert b.get(bad) is None
    assert not b.cancel(bad, now) and not b.requeue(bad, now) and not b.run_now(bad, now)
    assert not b.delete_job(bad, now) and not b.requeue_node(bad, now)
    assert b.purge(now, ids=[bad]) == 0
    result = Operator(app).bulk("delete", ids=[bad])
    assert (result.matched, result.done) == (1, 0)
