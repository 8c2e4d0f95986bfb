"""``conveyor.contrib.sentry``: failed jobs reach Sentry once, with their job context.

A real ``sentry_sdk`` client with its own ``Transport`` hook capturing the envelopes it would
send (no network, no fake Sentry server).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("sentry_sdk")

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from conveyor import Conveyor, FakeClock, JobState, PermanentError
from conveyor.contrib.sentry import SentryMiddleware
from tests.support.hostile import HOSTILE_TEXT


class Capture(Transport):
    """The SDK's transport hook: keeps every envelope instead of sending it."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)

    def events(self) -> list[dict[str, Any]]:
        return [e for env in self.envelopes if (e := env.get_event()) is not None]


@pytest.fixture
def sent() -> Iterator[Capture]:
    transport = Capture()
    sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=transport)
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)


def make_app(**options: Any) -> Conveyor:
    return Conveyor(
        "memory://", clock=FakeClock(1_700_000_000.0), middleware=[SentryMiddleware(**options)]
    )


def run_all(app: Conveyor) -> None:
    clock = app.clock
    assert isinstance(clock, FakeClock)
    for _ in range(6):
        app.worker().run_until_idle()
        clock.advance(3600)  # past any retry backoff


def test_one_report_for_a_job_that_failed_every_attempt(sent: Capture) -> None:
    app = make_app()

    @app.task(max_attempts=3)
    def charge(card: str, amount: int = 0) -> None:
        raise ValueError("card declined")

    job = charge.enqueue("4242-secret", amount=12)
    run_all(app)
    assert job.refresh().state is JobState.DEAD_LETTER
    events = sent.events()
    assert len(events) == 1  # three failed attempts, one report
    event = events[0]
    assert event["exception"]["values"][-1]["type"] == "ValueError"
    assert event["exception"]["values"][-1]["value"] == "card declined"
    assert event["exception"]["values"][-1]["stacktrace"]["frames"]  # the handler's traceback
    tags = event["tags"]
    assert tags["conveyor.task"] == "charge" and tags["conveyor.queue"] == "default"
    assert tags["conveyor.attempt"] == "3" and tags["conveyor.job_id"] == job.id
    assert tags["conveyor.outcome"] == "dead_letter"
    ctx = event["contexts"]["conveyor job"]
    assert ctx["id"] == job.id and ctx["attempt"] == 3 and ctx["max_attempts"] == 3
    assert ctx["args"] == ["str"] and ctx["kwargs"] == {"amount": "int"}  # no PII by default
    # (Sentry's own stack frames still hold local variables unless include_local_variables=False)
    assert "4242-secret" not in str(event["contexts"]) + str(event["tags"])


def test_every_attempt_when_asked_and_values_when_allowed(sent: Capture) -> None:
    app = make_app(report="every", include_args=True, max_arg_chars=50)

    @app.task(max_attempts=2)
    def flaky(text: str) -> None:
        raise RuntimeError("again")

    flaky.enqueue(HOSTILE_TEXT["long"])
    run_all(app)
    events = sent.events()
    assert [e["tags"]["conveyor.outcome"] for e in events] == ["retry_scheduled", "dead_letter"]
    shown = events[0]["contexts"]["conveyor job"]["args"][0]
    assert shown.startswith("'xxx") and shown.endswith("(5002 chars)") and len(shown) < 80


def test_permanent_errors_are_reported_once_successes_never(sent: Capture) -> None:
    app = make_app()

    @app.task(max_attempts=5)
    def refuse() -> None:
        raise PermanentError("bad input")

    @app.task
    def fine() -> None:
        pass

    refuse.enqueue()
    fine.enqueue()
    run_all(app)
    events = sent.events()
    assert len(events) == 1 and events[0]["tags"]["conveyor.task"] == "refuse"


def test_what_the_handler_captures_carries_the_job_tags(sent: Capture) -> None:
    app = make_app()

    @app.task
    def chatty() -> None:
        sentry_sdk.capture_message("from the handler")
        logging.getLogger("myapp").error("an error log inside the job")

    job = chatty.enqueue()
    run_all(app)
    events = sent.events()
    assert len(events) == 2  # the message and the error log (Sentry's logging integration)
    assert all(e["tags"]["conveyor.job_id"] == job.id for e in events)
    assert all(e["tags"]["conveyor.task"] == "chatty" for e in events)
    sentry_sdk.capture_message("outside")
    assert "conveyor.job_id" not in sent.events()[-1].get("tags", {})  # the scope was closed


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="report"):
        SentryMiddleware(report="sometimes")  # type: ignore[arg-type]
