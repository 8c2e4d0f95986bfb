"""Contract: limits changed at run time (no restart), queue limits, and why a job waits."""

from __future__ import annotations

import pytest

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, RateLimit, ValidationError
from conveyor.monitoring.limits import why_waiting


def _claim(app: Conveyor, clock: FakeClock, queue: str = "default") -> list[str]:
    return [lease.id for lease in app.broker.claim([queue], clock.now(), limit=20)]


def test_rate_limit_changed_at_run_time_and_why(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="flow.partner", rate_limit="1/m")
    def partner(i: int) -> None: ...

    jobs = [partner.enqueue(i) for i in range(5)]
    assert len(_claim(app, clock)) == 1
    assert _claim(app, clock) == []
    status = app.limits()
    assert status["declared"]["rate:flow.partner"] == "1/m"
    why = why_waiting(status, jobs[1].refresh())
    assert why == "throttled by rate limit flow.partner:1/m"
    app.set_limit("rate:flow.partner", "10/s", burst=2)
    assert app.limits()["limits"]["rate:flow.partner"] == [10.0, 1.0, 2.0]
    clock.advance(0.5)  # a claim that looks at the group again uses the new rate
    assert len(_claim(app, clock)) >= 1
    app.set_limit("rate:flow.partner", None)
    assert app.limits()["limits"] == {}


def test_concurrency_raised_at_run_time(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="flow.sync", concurrency=ConcurrencyLimit(1, key="account_id"))
    def sync(account_id: int, n: int) -> None: ...

    jobs = [sync.enqueue(42, n) for n in range(3)]
    assert len(_claim(app, clock)) == 1 and _claim(app, clock) == []
    status = app.limits()
    assert why_waiting(status, jobs[1].refresh()) == "waiting for account_id=42 (1 running)"
    assert list(status["running"]) == ["conc:flow.sync:account_id=42"]
    app.set_limit("conc:flow.sync", 2)
    assert len(_claim(app, clock)) == 1


def test_queue_limits(app: Conveyor, clock: FakeClock) -> None:
    app.queue("partner", rate_limit="2/s", concurrency=5)
    for i in range(6):
        app.enqueue("anything", [i], queue="partner")
    app.enqueue("anything", [99])  # another queue: not limited
    assert len(_claim(app, clock, "partner")) == 2
    assert len(_claim(app, clock)) == 1
    clock.advance(10)
    assert len(_claim(app, clock, "partner")) == 2
    clock.advance(10)
    assert len(_claim(app, clock, "partner")) == 1, "5 running at most"


def test_bad_run_time_limits_are_refused(app: Conveyor) -> None:
    with pytest.raises(ValidationError, match="name"):
        app.set_limit("partner", "10/s")
    with pytest.raises(ValidationError, match="limit"):
        app.set_limit("rate:x", "fast")
    with pytest.raises(ValidationError, match="limit"):
        app.set_limit("conc:x", 0)
    with pytest.raises(ValidationError, match="queue"):
        app.queue("bad queue", rate_limit="1/s")


def test_why_names_the_queue_limit_for_every_waiting_group(app: Conveyor, clock: FakeClock) -> None:
    """A claim stops at an exhausted queue limit after setting one group aside; the jobs of
    the groups it did not reach still say why they wait: the queue's limit."""
    flow_app = app
    flow_app.queue("llm", rate_limit="1/m")

    @flow_app.task(name="flow.ask", queue="llm", rate_limit=RateLimit("100/s", key="customer"))
    def ask(customer: int) -> None: ...

    jobs = [ask.enqueue(c) for c in range(20)]
    assert len(_claim(flow_app, clock, "llm")) == 1
    assert _claim(flow_app, clock, "llm") == []
    status = flow_app.limits()
    waiting = [why_waiting(status, job.refresh()) for job in jobs]
    assert waiting.count(None) == 1  # the one that runs
    assert set(waiting) - {None} == {"throttled by rate limit @llm:1/m"}


def test_an_override_set_before_a_queue_exists_reaches_it(app: Conveyor, clock: FakeClock) -> None:
    """Run-time limits apply to jobs enqueued later into a queue that held no job yet (Redis
    kept overrides per queue and wrote them only into queues it already knew)."""

    @app.task(name="flow.fresh", queue="fresh", concurrency=3)
    def fresh(n: int) -> None: ...

    @app.task(name="flow.newq", queue="newq", rate_limit="100/s")
    def newq(n: int) -> None: ...

    app.set_limit("conc:flow.fresh", 1)
    app.set_limit("rate:flow.newq", "1/m")
    app.set_limit("rate:flow.newq", "2/m")  # the newest write wins
    assert app.limits()["limits"] == {"conc:flow.fresh": [1.0], "rate:flow.newq": [2.0, 60.0, 2.0]}
    for n in range(3):
        fresh.enqueue(n)
        newq.enqueue(n)
    assert len(_claim(app, clock, "fresh")) == 1, "the override (1), not the declared 3"
    assert len(_claim(app, clock, "newq")) == 2, "the override (2/m), not the declared 100/s"
    app.set_limit("conc:flow.fresh", None)  # cleared: the declared limit again
    assert "conc:flow.fresh" not in app.limits()["limits"]
    assert len(_claim(app, clock, "fresh")) == 2
