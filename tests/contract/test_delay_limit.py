"""Delays beyond ``MAX_DELAY`` (100 years) are refused with a ValidationError naming the field,
on every backend (item 4 of session 10's hardening).

``enqueue_in(1e99)`` used to be accepted: the job was stored with ``run_at`` ~1e99, which no
page, CLI table or datetime can show (``datetime.fromtimestamp`` overflows), and it could never
run. Celery's ``countdown`` and Sidekiq's ``perform_in`` take any number, but nobody means a
delay of more than a century: it is a unit mistake (milliseconds for seconds) or garbage.
"""

from __future__ import annotations

import datetime as dt

import pytest

from conveyor import Conveyor, JobState
from conveyor.core.clock import FakeClock
from conveyor.core.job import MAX_DELAY
from conveyor.errors import RateLimited, Retry, ValidationError

OVER = [MAX_DELAY + 1.0, 1e99, 10**30]


def _refused(field: str) -> pytest.RaisesContext[ValidationError]:
    return pytest.raises(ValidationError, match=rf"^{field}: .*100 years")


@pytest.mark.parametrize("seconds", OVER, ids=str)
def test_enqueue_in_refuses_delays_over_the_maximum(app: Conveyor, seconds: float) -> None:
    @app.task
    def later() -> None:
        pass

    with _refused("delay"):
        later.enqueue_in(seconds)
    with _refused("delay"):
        later.options(delay=seconds).enqueue()
    with _refused("delay"):
        app.enqueue("later", delay=seconds)
    assert app.stats().get("scheduled", 0) == 0 or app.stats()["scheduled"] == 0


def test_a_timedelta_over_the_maximum_is_refused(app: Conveyor) -> None:
    @app.task
    def later() -> None:
        pass

    with _refused("delay"):
        later.enqueue_in(dt.timedelta(days=365 * 101))


def test_the_maximum_itself_is_accepted(app: Conveyor, clock: FakeClock) -> None:
    @app.task
    def later() -> None:
        pass

    job = later.enqueue_in(MAX_DELAY)
    assert job.refresh().state is JobState.SCHEDULED
    assert job.run_at is not None and job.run_at == pytest.approx(clock.now() + MAX_DELAY)


def test_run_at_beyond_the_maximum_is_refused(app: Conveyor, clock: FakeClock) -> None:
    @app.task
    def later() -> None:
        pass

    with _refused("run_at"):
        later.options(run_at=clock.now() + MAX_DELAY + 60).enqueue()
    with _refused("run_at"):
        later.options(run_at=1e99).enqueue()
    when = dt.datetime.fromtimestamp(clock.now(), dt.UTC) + dt.timedelta(days=365 * 101)
    with _refused("run_at"):
        later.enqueue_at(when)


def test_other_durations_over_the_maximum_are_refused(app: Conveyor) -> None:
    @app.task
    def later() -> None:
        pass

    with _refused("debounce"):
        later.options(debounce=1e99).enqueue()
    with _refused("expires_in"):
        later.options(expires_in=1e99).enqueue()
    with _refused("idempotency_ttl"):
        later.options(idempotency_key="k", idempotency_ttl=1e99).enqueue()
    with _refused("timeout"):
        later.options(timeout=1e99).enqueue()


@pytest.mark.parametrize("error", [Retry(delay=1e300), RateLimited(retry_after=1e99)], ids=repr)
def test_handler_delays_over_the_maximum_wait_the_maximum(
    app: Conveyor, clock: FakeClock, error: Exception
) -> None:
    """A handler's delay is the remote service's word (a ``Retry-After`` header): refusing it
    would retry at once, so it is capped at ``MAX_DELAY`` instead, a date every page can show
    (``1e300`` used to store a ``run_at`` past year 9999)."""

    @app.task(max_attempts=3)
    def far() -> None:
        raise error

    job = far.enqueue()
    assert app.worker().run_until_idle() == 1
    job.refresh()
    assert job.state in (JobState.RETRY_SCHEDULED, JobState.SCHEDULED), job.state
    assert job.run_at == pytest.approx(clock.now() + MAX_DELAY)


def test_nack_refuses_a_delay_over_the_maximum_and_keeps_the_lease(app: Conveyor) -> None:
    @app.task
    def later() -> None:
        pass

    later.enqueue()
    delivery = app.dequeue()
    assert delivery is not None
    with _refused("delay"):
        delivery.nack(1e99)
    assert delivery.nack(5.0) is JobState.SCHEDULED


def test_task_declarations_refuse_durations_over_the_maximum(app: Conveyor) -> None:
    with _refused("timeout"):
        app.task(name="slow", timeout=1e99)(lambda: None)
    with _refused("idempotency_ttl"):
        app.task(name="kept", idempotency_ttl=1e99)(lambda: None)


def test_extend_refuses_a_lease_over_the_maximum_and_keeps_the_lease(app: Conveyor) -> None:
    """``delivery.extend(1e99)``: a consumer that then died held the job for ever."""

    @app.task
    def later() -> None:
        pass

    later.enqueue()
    delivery = app.dequeue()
    assert delivery is not None
    with _refused("seconds"):
        delivery.extend(1e99)
    delivery.extend(60.0)
    delivery.ack()
    assert app.get_job(delivery.id).state is JobState.COMPLETED


@pytest.mark.parametrize("seconds", OVER, ids=str)
def test_dequeue_refuses_a_visibility_timeout_over_the_maximum(
    app: Conveyor, seconds: float
) -> None:
    """``app.dequeue(visibility_timeout=1e99)``: the lease never expired, so a consumer that
    died held the job for ever (the worker's own option is bounded the same way)."""

    @app.task
    def later() -> None:
        pass

    later.enqueue()
    with _refused("visibility_timeout"):
        app.dequeue(visibility_timeout=seconds)
    delivery = app.dequeue(visibility_timeout=60.0)  # nothing was leased by the refused call
    assert delivery is not None
