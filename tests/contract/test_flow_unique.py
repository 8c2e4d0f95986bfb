"""Contract: unique jobs (issue 15) — while_queued, while_running, until_done, unique_key."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, ValidationError
from conveyor.broker.base import Ack


def _claim(app: Conveyor, clock: FakeClock) -> list[str]:
    return [lease.id for lease in app.broker.claim(["default"], clock.now(), limit=20)]


def test_while_queued_dedups_until_the_job_starts(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="flow.report")
    def report(user: int) -> None: ...

    first = report.options(unique="while_queued").enqueue(7)
    again = report.options(unique="while_queued").enqueue(7)
    other = report.options(unique="while_queued").enqueue(8)
    assert again.duplicate and again.id == first.id and not other.duplicate
    assert sorted(_claim(app, clock)) == sorted([first.id, other.id])
    after_start = report.options(unique="while_queued").enqueue(7)
    assert not after_start.duplicate, "the first one runs: a new one may wait"


def test_until_done_dedups_while_running_too(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="flow.build")
    def build(ref: str) -> None: ...

    first = build.options(unique="until_done", unique_key="main").enqueue("a")
    (lease,) = app.broker.claim(["default"], clock.now(), limit=5)
    running = build.options(unique="until_done", unique_key="main").enqueue("b")
    assert running.duplicate and running.id == first.id
    app.broker.complete([Ack(lease.id, lease.token)], clock.now())
    done = build.options(unique="until_done", unique_key="main").enqueue("c")
    assert not done.duplicate


def test_while_running_holds_a_second_job(app: Conveyor, clock: FakeClock) -> None:
    if not getattr(app.broker, "supports_flow", False):
        pytest.skip("no flow control on this backend")

    @app.task(name="flow.deploy")
    def deploy(env: str) -> None: ...

    first = deploy.options(unique="while_running", unique_key="prod").enqueue("v1")
    (lease,) = app.broker.claim(["default"], clock.now(), limit=20)
    assert lease.id == first.id
    second = deploy.options(unique="while_running", unique_key="prod").enqueue("v2")
    assert not second.duplicate and _claim(app, clock) == [], "held while the first runs"
    error = {"kind": "error", "message": "x", "type": "E", "traceback": ""}
    app.broker.fail(lease.id, lease.token, clock.now(), error=error, retry_at=None)
    assert _claim(app, clock) == [second.id]


def test_bad_unique_options_are_refused(app: Conveyor) -> None:
    with pytest.raises(ValidationError, match="unique"):
        app.enqueue("t", unique="forever")
    with pytest.raises(ValidationError, match="unique_key"):
        app.enqueue("t", unique_key="k")
    with pytest.raises(ValidationError, match="unique"):
        app.enqueue("t", unique="while_queued", idempotency_key="k")


def test_two_unique_jobs_in_one_batch_are_one_job(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="flow.digest")
    def digest(user: int) -> None: ...

    once = digest.options(unique="until_done")
    first, again, other = app.enqueue_many([once.spec(3), once.spec(3), once.spec(4)])
    assert again.duplicate and again.id == first.id and not other.duplicate
    assert sorted(_claim(app, clock)) == sorted([first.id, other.id])
