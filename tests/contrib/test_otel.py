"""``conveyor.contrib.otel``: the trace goes from the enqueue into the job's handler.

Spans are collected with the SDK's own ``InMemorySpanExporter`` on a real ``TracerProvider``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from conveyor import Conveyor, FakeClock, JobState
from conveyor.config import Settings
from conveyor.contrib.otel import OpenTelemetryMiddleware
from tests.support.hostile import HOSTILE_TEXT, UNENCODABLE
from tests.worker.conftest import FAST, running, wait_until

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = spans(exporter, name)
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def memory_app(provider: TracerProvider, **options: Any) -> Conveyor:
    return Conveyor(
        "memory://",
        clock=FakeClock(1_700_000_000.0),
        middleware=[OpenTelemetryMiddleware(provider, **options)],
    )


def test_the_job_span_is_a_child_of_the_enqueue_span(
    app: Conveyor, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """On every backend (the trace context travels in the stored envelope)."""
    app.middleware.append(OpenTelemetryMiddleware(provider))
    tracer = provider.get_tracer("test")

    @app.task
    def charge(amount: int) -> None:
        with tracer.start_as_current_span("inside the handler"):
            pass

    meta = {"mine": 1}
    with tracer.start_as_current_span("http request"):
        job = app.enqueue("charge", args=[5], metadata=meta)
    assert meta == {"mine": 1}  # the caller's dict is not changed
    stored = app.broker.get(job.id)
    assert stored is not None and TRACEPARENT.match(stored.metadata["traceparent"])
    assert stored.metadata["mine"] == 1
    assert app.worker().run_until_idle() == 1

    request = one(exporter, "http request")
    enqueue = one(exporter, "enqueue charge")
    process = one(exporter, "process charge")
    inner = one(exporter, "inside the handler")
    assert enqueue.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert enqueue.parent is not None and enqueue.parent.span_id == request.context.span_id
    assert process.parent is not None and process.parent.span_id == enqueue.context.span_id
    assert inner.parent is not None and inner.parent.span_id == process.context.span_id
    assert len({s.context.trace_id for s in (request, enqueue, process, inner)}) == 1
    attrs = dict(process.attributes or {})
    assert attrs["messaging.message.id"] == job.id and attrs["conveyor.task"] == "charge"
    assert attrs["messaging.destination.name"] == "default" and attrs["conveyor.attempt"] == 1
    assert attrs["conveyor.outcome"] == "success" and attrs["messaging.system"] == "conveyor"
    assert process.status.status_code is StatusCode.UNSET


def test_a_failure_sets_the_error_status_on_every_attempt(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app = memory_app(provider)
    clock = app.clock
    assert isinstance(clock, FakeClock)

    @app.task(max_attempts=2)
    def flaky() -> None:
        raise ValueError("nope")

    job = flaky.enqueue()
    app.worker().run_until_idle()
    clock.advance(3600)
    app.worker().run_until_idle()
    assert job.refresh().state is JobState.DEAD_LETTER
    runs = spans(exporter, "process flaky")
    assert [dict(s.attributes or {})["conveyor.attempt"] for s in runs] == [1, 2]
    for span in runs:
        assert span.status.status_code is StatusCode.ERROR
        assert "ValueError: nope" in (span.status.description or "")
        assert dict(span.attributes or {})["conveyor.outcome"] == "error"
        assert dict(span.attributes or {})["error.type"] == "builtins.ValueError"
        assert [e.name for e in span.events] == ["exception"]
    enqueue = one(exporter, "enqueue flaky")
    assert all(s.parent and s.parent.span_id == enqueue.context.span_id for s in runs)


def test_the_span_wraps_thread_and_asyncio_handlers(
    provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    from opentelemetry import trace

    app = Conveyor(
        f"sqlite:///{tmp_path / 'jobs.db'}",
        settings=Settings(**FAST),  # type: ignore[arg-type]
        rng=random.Random(1),
        middleware=[OpenTelemetryMiddleware(provider)],
    )
    seen: dict[str, int] = {}

    @app.task
    def sync_job(tag: str) -> None:
        seen[tag] = trace.get_current_span().get_span_context().span_id

    @app.task
    async def async_job(tag: str) -> None:
        seen[tag] = trace.get_current_span().get_span_context().span_id

    try:
        for i in range(3):
            sync_job.enqueue(f"s{i}")
            async_job.enqueue(f"a{i}")
        with running(app, concurrency=2) as worker:
            wait_until(lambda: worker.processed == 6, timeout=20)
    finally:
        app.close()
    ids = {s.context.span_id for s in exporter.get_finished_spans() if s.name.startswith("process")}
    assert len(ids) == 6 and set(seen.values()) == ids  # each handler ran inside its own span


@pytest.mark.parametrize(
    "value", [12, "00-zz", HOSTILE_TEXT["newline"], "x" * 5000, {"traceparent": "nested"}]
)
def test_hostile_trace_metadata_starts_a_new_trace(
    value: Any, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0))  # a producer without otel

    @app.task
    def plain() -> str:
        return "ran"

    job = app.enqueue("plain", metadata={"traceparent": value})
    app.middleware.append(OpenTelemetryMiddleware(provider))
    app.worker().run_until_idle()
    assert job.refresh().result == "ran"
    process = one(exporter, "process plain")
    assert process.parent is None  # a root span: the garbage was ignored


def test_optional_metrics(provider: TracerProvider) -> None:
    reader = InMemoryMetricReader()
    app = memory_app(provider, metrics_enabled=True, meter_provider=MeterProvider([reader]))

    @app.task(max_attempts=1)
    def maybe(fail: bool) -> None:
        if fail:
            raise RuntimeError("x")

    maybe.enqueue(False)
    maybe.enqueue(True)
    app.worker().run_until_idle()
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points[metric.name] = list(metric.data.data_points)
    assert sum(p.value for p in points["conveyor.jobs.enqueued"]) == 2
    outcomes = {p.attributes["conveyor.outcome"]: p.count for p in points["conveyor.job.duration"]}
    assert outcomes == {"completed": 1, "dead_letter": 1}


def _texts(span: ReadableSpan) -> list[str]:
    """Every string an exporter sends for ``span``: status, attributes, event attributes."""
    found = [span.status.description or ""]
    for attrs in [span.attributes or {}, *(e.attributes or {} for e in span.events)]:
        found += [v for v in attrs.values() if isinstance(v, str)]
    return found


def test_a_lone_surrogate_in_the_error_does_not_break_the_export(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A handler failing on a non-UTF-8 file name (``os.listdir`` gives lone surrogates): the
    span's texts stay valid UTF-8 — OTLP (protobuf strings) refuses anything else and drops the
    whole batch of spans it was exporting — and the message is still readable."""
    app = memory_app(provider)
    name = UNENCODABLE["lone_surrogate"]

    @app.task(max_attempts=1)
    def read() -> None:
        raise ValueError(f"cannot read {name}")  # an f-string keeps the surrogate as is

    read.enqueue()
    app.worker().run_until_idle()
    span = one(exporter, "process read")
    assert span.status.status_code is StatusCode.ERROR
    for text in _texts(span):
        text.encode("utf-8")  # raised UnicodeEncodeError before
    assert "name-\\udcff.txt" in (span.status.description or "")
    (event,) = span.events
    assert "name-\\udcff.txt" in str((event.attributes or {})["exception.message"])


class _Unprintable(Exception):
    """An exception whose ``str()`` itself raises."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


def test_an_exception_whose_str_raises_keeps_the_jobs_error(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The middleware (and the SDK's ``record_exception``) called ``str(exc)``: its
    RuntimeError replaced the handler's exception, so the job was recorded with the wrong
    type and message. Now the job keeps its own error and the span says what it can."""
    app = memory_app(provider)

    @app.task(max_attempts=1)
    def odd() -> None:
        raise _Unprintable()

    job = odd.enqueue()
    app.worker().run_until_idle()
    entry = job.refresh().errors[-1]
    assert entry["type"] == "_Unprintable"
    assert entry["message"] == "<str() failed: RuntimeError>"
    span = one(exporter, "process odd")
    assert span.status.status_code is StatusCode.ERROR
    assert "_Unprintable: <str() failed: RuntimeError>" in (span.status.description or "")
    (event,) = span.events
    attributes = dict(event.attributes or {})
    assert event.name == "exception"
    assert attributes["exception.type"].endswith("_Unprintable")
    assert attributes["exception.message"] == "<str() failed: RuntimeError>"
    assert "_Unprintable" in str(attributes["exception.stacktrace"])


def test_the_hook_itself_reraises_the_handlers_exception_whose_str_raises(
    provider: TracerProvider, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """Used as a plain context manager (and through the worker, which logged the hook's
    RuntimeError as "around_process (exit) failed"), the hook raised ``str()``'s error."""
    from types import SimpleNamespace

    from conveyor.core.job import Job

    middleware = OpenTelemetryMiddleware(provider)
    job = Job(id="j1", task="odd", args=[], kwargs={})
    with pytest.raises(_Unprintable), middleware.around_process(SimpleNamespace(id="w"), job):
        raise _Unprintable()
    assert one(exporter, "process odd").status.status_code is StatusCode.ERROR
    app = memory_app(provider)
    app.task(max_attempts=1, name="odd2")(_raise_unprintable)
    app.enqueue("odd2")
    app.worker().run_until_idle()
    assert not [r for r in caplog.records if "around_process" in r.getMessage()]


def _raise_unprintable() -> None:
    raise _Unprintable()
