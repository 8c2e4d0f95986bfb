"""Exceptions and results a handler can produce that are hard to describe or store.

Whatever a job raises or returns, its attempt is recorded (never left ``active`` until its
lease runs out) and the worker's slot is freed: with ``concurrency=1`` the next job still runs.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest

from conveyor import Backoff, Conveyor, JobState
from conveyor.errors import RateLimited, Retry, ValidationError
from tests.worker.conftest import running, wait_until


class StrRaises(Exception):
    """An exception whose ``str()`` itself raises."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


class BareRetry(Retry):
    """A ``Retry`` subclass that forgets to call ``Retry.__init__`` (no ``delay``)."""

    def __init__(self) -> None:
        Exception.__init__(self, "bare retry")


class BareRateLimited(RateLimited):
    """A ``RateLimited`` subclass that forgets to call its ``__init__`` (no ``retry_after``)."""

    def __init__(self) -> None:
        Exception.__init__(self, "bare rate limited")


class BrokenZone(dt.tzinfo):
    """A time zone whose offset raises: encoding a datetime in it fails."""

    def utcoffset(self, when: dt.datetime | None) -> dt.timedelta:
        raise RuntimeError("no offset here\nforged: log line")

    def dst(self, when: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(0)


def _ended(job: Any) -> bool:
    return job.refresh().state in (JobState.DEAD_LETTER, JobState.COMPLETED)


def _next_job_runs(app: Conveyor, fine: Any) -> None:
    """With one slot, a job enqueued after the hostile one still runs."""
    good = fine.enqueue()
    wait_until(lambda: good.refresh().state is JobState.COMPLETED, 10)


def test_an_exception_whose_str_raises_is_recorded(live_app: Conveyor) -> None:
    app = live_app

    @app.task(max_attempts=1)
    def unprintable() -> None:
        raise StrRaises()

    @app.task
    def fine() -> str:
        return "ok"

    with running(app, concurrency=1):
        job = unprintable.enqueue()
        wait_until(lambda: _ended(job), 10)
        _next_job_runs(app, fine)
    assert job.state is JobState.DEAD_LETTER
    entry = job.errors[-1]
    assert entry["type"] == "StrRaises"
    assert "str() failed" in entry["message"]


@pytest.mark.parametrize("delay", ["5", float("nan"), float("inf"), [1]])
def test_retry_with_a_bad_delay_is_a_clear_failure(live_app: Conveyor, delay: Any) -> None:
    app = live_app

    @app.task(max_attempts=2, backoff=Backoff.fixed(0.05))
    def retries() -> None:
        raise Retry(delay=delay)

    @app.task
    def fine() -> str:
        return "ok"

    with running(app, concurrency=1):
        job = retries.enqueue()
        wait_until(lambda: _ended(job), 10)
        _next_job_runs(app, fine)
    assert job.state is JobState.DEAD_LETTER
    assert [e["type"] for e in job.errors] == ["ValidationError", "ValidationError"]
    assert job.errors[0]["message"].startswith("delay: must be a finite number of seconds")


def test_retry_and_rate_limited_subclasses_without_their_fields(live_app: Conveyor) -> None:
    app = live_app

    @app.task(max_attempts=1)
    def bare_retry() -> None:
        raise BareRetry()

    @app.task(max_attempts=1)
    def bare_limited() -> None:
        raise BareRateLimited()

    @app.task
    def fine() -> str:
        return "ok"

    with running(app, concurrency=1):
        retried = bare_retry.enqueue()
        wait_until(lambda: _ended(retried), 10)
        limited = bare_limited.enqueue()
        wait_until(lambda: limited.refresh().state is JobState.SCHEDULED, 10)
        _next_job_runs(app, fine)
    assert retried.state is JobState.DEAD_LETTER  # its only attempt: no delay needed
    assert limited.attempts == 0  # given back without spending an attempt (1 s default)


def test_a_result_whose_encoding_raises_completes_without_it(
    live_app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    app = live_app

    @app.task
    def odd_result() -> Any:
        return {"when": dt.datetime(2026, 1, 1, tzinfo=BrokenZone())}

    @app.task
    def fine() -> str:
        return "ok"

    with caplog.at_level(logging.WARNING, logger="conveyor"), running(app, concurrency=1):
        job = odd_result.enqueue()
        wait_until(lambda: _ended(job), 10)
        _next_job_runs(app, fine)
    [line] = [r.getMessage() for r in caplog.records if "result not stored" in r.getMessage()]
    assert "no offset here\\nforged" in line and "\n" not in line  # one line, escaped
    assert job.state is JobState.COMPLETED
    assert job.result is None
    entry = job.errors[-1]
    assert entry["kind"] == "result_error"
    assert "no offset here" in entry["message"]


def test_process_jobs_with_hostile_outcomes_free_their_child(live_app: Conveyor) -> None:
    """In a process-pool child: a ``Retry`` keeps its delay across the pipe; a result that
    cannot be pickled or that the worker cannot unpickle, and an exception whose ``str()``
    raises, are recorded, and the single child goes on to run the next job."""
    from tests.worker.apps import funcs

    app = live_app
    retry = app.task(executor="process", name="h_retry", max_attempts=2)(funcs.retry_in)
    unloadable = app.task(executor="process", name="h_unloadable")(funcs.unloadable)
    unprintable = app.task(executor="process", name="h_unprintable", max_attempts=1)(
        funcs.unprintable
    )
    unpicklable = app.task(executor="process", name="h_unpicklable")(funcs.unpicklable)
    square = app.task(executor="process", name="h_square")(funcs.square)
    with running(app, concurrency=1, process_pool_size=1):
        lock = unpicklable.enqueue()
        wait_until(lambda: _ended(lock), 15)
        later = retry.enqueue(3600)
        wait_until(lambda: later.refresh().state is JobState.RETRY_SCHEDULED, 15)
        odd = unloadable.enqueue()
        wait_until(lambda: _ended(odd), 15)
        bad = unprintable.enqueue()
        wait_until(lambda: _ended(bad), 15)
        last = square.enqueue(7)
        wait_until(lambda: last.refresh().state is JobState.COMPLETED, 15)
    # the work happened: completed without the result, as on the thread executor (was: an
    # error, so the job ran again)
    assert lock.state is JobState.COMPLETED and lock.attempts == 1 and lock.result is None
    assert "cannot be sent from the child process" in lock.errors[-1]["message"]
    assert later.errors[-1]["type"] == "Retry"
    assert later.run_at - later.errors[-1]["at"] == pytest.approx(3600)
    assert odd.state is JobState.COMPLETED and odd.result is None
    assert "cannot be rebuilt" in odd.errors[-1]["message"]
    assert bad.state is JobState.DEAD_LETTER
    assert bad.errors[-1]["type"] == "Unprintable"
    assert "str() failed" in bad.errors[-1]["message"]
    assert last.result == 49


def test_a_retry_past_year_9999_can_still_be_inspected(live_app: Conveyor) -> None:
    """``Retry(delay=1e300)`` (a remote service's absurd Retry-After): the job waits, and its
    page, API answer and ``conveyor job`` (``Inspector.job``) still show it. Since session 10
    the delay is capped at ``MAX_DELAY`` (100 years), so the retry time is a date again (it was
    shown as "out of range"); a ``run_at`` past 9999 written by another client still is."""
    from conveyor.monitoring.inspect import Inspector

    app = live_app

    @app.task(max_attempts=2)
    def far() -> None:
        raise Retry(delay=1e300)

    with running(app, concurrency=1):
        job = far.enqueue()
        wait_until(lambda: job.refresh().state is JobState.RETRY_SCHEDULED, 10)
    detail = Inspector(app).job(job.id)
    details = " ".join(str(t["detail"]) for t in detail["timeline"])
    year = dt.datetime.fromtimestamp(job.refresh().run_at or 0, dt.UTC).year
    assert year >= 2120 and str(year) in details, details


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"retry_on": ["builtins.ValueError"]}, "retry_on"),  # names: per job only
        ({"retry_on": [int]}, "retry_on"),
        ({"dead_on": "ValueError"}, "dead_on"),  # was a tuple of letters
        ({"dead_on": [KeyError, "x"]}, "dead_on"),
        ({"backoff": "exponential"}, "backoff"),
        ({"backoff": 5}, "backoff"),
    ],
)
def test_task_retry_options_are_checked_when_declared(
    live_app: Conveyor, options: dict[str, Any], field: str
) -> None:
    """Caught by ``@app.task``, not by the worker at the job's first failure (where they
    raised TypeError / AttributeError while classifying it)."""
    with pytest.raises(ValidationError, match=rf"^{field}: "):
        live_app.task(name="declared", **options)(lambda: None)


def test_a_single_exception_class_is_accepted_for_retry_on(live_app: Conveyor) -> None:
    app = live_app

    @app.task(max_attempts=3, retry_on=KeyError, backoff=Backoff.fixed(0.05))
    def flaky(kind: str) -> None:
        raise KeyError(kind) if kind == "key" else ValueError(kind)

    with running(app, concurrency=2):
        retried, permanent = flaky.enqueue("key"), flaky.enqueue("value")
        wait_until(lambda: _ended(retried) and _ended(permanent), 10)
    assert [e["kind"] for e in retried.errors] == ["error", "error", "error"]
    assert [e["kind"] for e in permanent.errors] == ["permanent"]


def test_rate_limited_with_a_lone_surrogate_in_its_reason(live_app: Conveyor) -> None:
    """The ``released`` note quotes the reason: a lone surrogate (a file name from
    ``os.listdir``) made the release fail, and with it every outcome of the batch."""
    from tests.support.hostile import UNENCODABLE

    app = live_app
    seen: list[int] = []

    @app.task
    def limited() -> None:
        seen.append(1)
        if len(seen) == 1:
            raise RateLimited(retry_after=0.05, reason=UNENCODABLE["lone_surrogate"])

    @app.task
    def fine() -> str:
        return "ok"

    with running(app, concurrency=1):
        job = limited.enqueue()
        wait_until(lambda: job.refresh().state is JobState.COMPLETED, 10)
        _next_job_runs(app, fine)
    assert job.attempts == 1 and not job.errors  # the rate-limited try cost no attempt
    released = [h for h in job.history if h["event"] == "released"]
    assert "rate limited: name-\\udcff.txt" in released[0]["note"]


def test_process_job_exceptions_with_their_own_init_keep_their_class(live_app: Conveyor) -> None:
    """An exception whose ``__init__`` takes other arguments than its ``args`` (most custom
    ones) came back from the child as ``RemoteError``: a ``PermanentError`` subclass was then
    retried, and its type lost."""
    from tests.worker.apps import funcs

    app = live_app
    lookup = app.task(executor="process", name="h_lookup", max_attempts=3)(funcs.lookup)
    with running(app, concurrency=1, process_pool_size=1):
        job = lookup.enqueue("sku-1")
        wait_until(lambda: _ended(job), 15)
    assert job.state is JobState.DEAD_LETTER and job.attempts == 1  # permanent: not retried
    assert job.errors[-1]["type"] == "PermanentGone"
    assert job.errors[-1]["kind"] == "permanent"
    assert job.errors[-1]["message"] == "sku-1 not found in the catalogue"


def test_a_process_job_exception_the_worker_cannot_rebuild_keeps_its_type_and_message(
    live_app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception that cannot travel back from the child as itself (a local class, an
    unpicklable attribute) was recorded as type ``RemoteError`` with ``"Type: message"`` as
    its message: now its own qualified type name and its own message, escaped as any other."""
    from tests.support.hostile import HOSTILE_TEXT
    from tests.worker.apps import funcs

    app = live_app
    raw = HOSTILE_TEXT["newline"]  # the child adds a lone surrogate (no argument can hold one)
    task = app.task(executor="process", name="h_unrebuildable", max_attempts=1)(funcs.unrebuildable)
    fine = app.task(executor="process", name="h_square2")(funcs.square)
    with (
        caplog.at_level(logging.WARNING, logger="conveyor"),
        running(app, concurrency=1, process_pool_size=1),
    ):
        job = task.enqueue(raw)
        wait_until(lambda: _ended(job), 15)
        after = fine.enqueue(3)
        wait_until(lambda: after.refresh().state is JobState.COMPLETED, 15)
    entry = job.errors[-1]
    assert job.state is JobState.DEAD_LETTER
    assert entry["type"] == "tests.worker.apps.funcs.unrebuildable.<locals>.UpstreamError"
    assert entry["message"] == "first line\nforged: log line name-\\udcff.txt"
    assert entry["kind"] == "error"
    assert "UpstreamError" in entry["traceback"]  # the child's own traceback
    [line] = [r.getMessage() for r in caplog.records if job.id in r.getMessage()]
    assert "\n" not in line and "forged: log line" in line  # one line, escaped
    assert "error=tests.worker.apps.funcs.unrebuildable.<locals>.UpstreamError:" in line


def test_a_process_job_exception_the_worker_cannot_rebuild_keeps_its_classification(
    live_app: Conveyor,
) -> None:
    """Rebuilt as ``RemoteError`` (an ordinary error), a ``PermanentError`` subclass was
    retried, and a job's ``dead_on`` naming one of its bases did not match: the child now
    sends the class's bases' names and the worker classifies by them."""
    from tests.worker.apps import funcs

    app = live_app
    task = app.task(executor="process", name="h_refused", max_attempts=3)(
        funcs.unrebuildable_permanent
    )
    with running(app, concurrency=1, process_pool_size=1):
        permanent = task.enqueue("permanent")
        lookup = task.options(dead_on=["builtins.LookupError"]).enqueue("lookup")
        wait_until(lambda: _ended(permanent) and _ended(lookup), 15)
    for job in (permanent, lookup):
        assert job.state is JobState.DEAD_LETTER and job.attempts == 1, job.errors
        assert job.errors[-1]["kind"] == "permanent"
        assert job.errors[-1]["type"].endswith("unrebuildable_permanent.<locals>.Refused")


def test_a_huge_exception_class_name_is_cut_in_the_stored_error(app: Conveyor) -> None:
    """The ``type`` of an ``errors`` entry was stored whole (a generated class name of any
    length), while the message is cut at 2,000 characters."""
    huge = type("E" * 5000, (Exception,), {})

    @app.task(max_attempts=1)
    def odd() -> None:
        raise huge("boom")

    job = odd.enqueue()
    app.worker().run_until_idle()
    entry = job.refresh().errors[-1]
    assert entry["type"] == "E" * 200 + "…" and entry["message"] == "boom"
