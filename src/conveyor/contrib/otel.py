"""OpenTelemetry for Conveyor (extra ``otel``): a trace from the enqueue into the job.

``OpenTelemetryMiddleware`` does three things:

* at enqueue (``before_enqueue``), a short PRODUCER span ``enqueue <task>`` whose W3C trace
  context (``traceparent``, ``tracestate``) is written into the job's ``metadata``
  (docs/wire-format.md) — the enqueue runs inside whatever span the caller has (an HTTP request);
* around the handler, ON THE HANDLER'S OWN THREAD (``around_process``), a CONSUMER span
  ``process <task>``, child of the enqueue span, current while the handler runs, so the spans the
  handler's own code opens (HTTP clients, databases) nest under it. Attributes: the job id,
  task, queue and attempt, and ``conveyor.outcome`` (``success``/``error``); a failure records
  the exception and sets the ERROR status;
* optionally (``metrics=True``) a histogram ``conveyor.job.duration`` (seconds, by task, queue
  and outcome) and a counter ``conveyor.jobs.enqueued`` (by task and queue).

With ``executor="process"`` the handler's span is made in the pool's child, by the middleware
of the app the child imported with the task: configure the tracer provider at import time of
that module (as for any forked worker). Configure providers and exporters as usual
(``opentelemetry-sdk``); the middleware uses the global ones unless given its own.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..core.job import Job
from ..core.retry import describe
from ..middleware import AppView, Middleware, WorkerView
from ..worker.execute import safe_text

#: The metadata keys carrying the W3C trace context (the header names of the W3C spec).
TRACE_KEYS = ("traceparent", "tracestate")
#: Longest trace header value taken from a job (the W3C limits are 55 and 512 chars).
MAX_HEADER = 1024
SYSTEM = "conveyor"
log = logging.getLogger("conveyor.otel")


class OpenTelemetryMiddleware(Middleware):
    """Trace context carried from enqueue into the job, and a span around each handler."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        propagator: TextMapPropagator | None = None,
        metrics_enabled: bool = False,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer("conveyor", tracer_provider=tracer_provider)
        self.propagator = propagator or propagate.get_global_textmap()
        self._duration: Any = None
        self._enqueued: Any = None
        if metrics_enabled:
            meter = metrics.get_meter("conveyor", meter_provider=meter_provider)
            self._duration = meter.create_histogram(
                "conveyor.job.duration", unit="s", description="Time a job's handler ran"
            )
            self._enqueued = meter.create_counter(
                "conveyor.jobs.enqueued", description="Jobs stored by enqueue"
            )

    # ------------------------------------------------------------------ producer side
    def before_enqueue(self, app: AppView, job: Job) -> None:
        """A PRODUCER span for the job; its context goes into ``job.metadata``."""
        span = self.tracer.start_span(
            f"enqueue {job.task}", kind=SpanKind.PRODUCER, attributes=_attributes(job, "send")
        )
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=trace.set_span_in_context(span))
        span.end()
        if carrier:  # a new dict: the caller's ``metadata=`` dict is never changed
            job.metadata = {**job.metadata, **carrier}

    def after_enqueue_batch(
        self, app: AppView, jobs: Sequence[Job], duplicates: Sequence[bool]
    ) -> None:
        """Count stored jobs (metrics enabled only)."""
        if self._enqueued is None:
            return
        for job, duplicate in zip(jobs, duplicates, strict=True):
            if not duplicate:
                self._enqueued.add(1, {"conveyor.task": job.task, "conveyor.queue": job.queue})

    # ------------------------------------------------------------------ consumer side
    @contextmanager
    def around_process(self, worker: WorkerView, job: Job) -> Iterator[None]:
        """The job's CONSUMER span, current on the handler's thread while it runs."""
        parent = self.propagator.extract(carrier=trace_carrier(job.metadata))
        with self.tracer.start_as_current_span(
            f"process {job.task}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={**_attributes(job, "process"), "conveyor.worker": worker.id},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as exc:
                _record_failure(span, exc)
                raise
            span.set_attribute("conveyor.outcome", "success")

    def after_process(
        self,
        worker: WorkerView,
        job: Job,
        *,
        outcome: str,
        duration: float,
        error: BaseException | None,
    ) -> None:
        """Record the handler's duration by outcome (metrics enabled only)."""
        if self._duration is not None:
            self._duration.record(
                duration,
                {
                    "conveyor.task": job.task,
                    "conveyor.queue": job.queue,
                    "conveyor.outcome": outcome,
                },
            )

    def after_process_batch(
        self, worker: WorkerView, jobs: Sequence[Job], durations: Sequence[float]
    ) -> None:
        """Completed jobs: durations (metrics enabled only; nothing to do otherwise)."""
        if self._duration is not None:
            super().after_process_batch(worker, jobs, durations)


def trace_carrier(metadata: Mapping[str, Any]) -> dict[str, str]:
    """The trace headers of a job's metadata (strings of sane length only: job data is
    untrusted, a malformed value is ignored, never an error)."""
    carrier = {}
    for key in TRACE_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and len(value) <= MAX_HEADER:
            carrier[key] = value
    return carrier


def _attributes(job: Job, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "conveyor.task": job.task,
        "conveyor.attempt": job.attempts,
    }


def _record_failure(span: trace.Span, exc: BaseException) -> None:
    """Mark the span failed with ``exc``'s texts; never raises, so the handler's own exception
    is what the worker records. The "exception" event is written here, not by the SDK's
    ``record_exception``: that calls ``str(exc)`` itself, and an exception whose ``__str__``
    raises would replace the job's error (``describe`` notes the failure instead)."""
    try:
        message = safe_text(describe(exc))
        span.set_attribute("conveyor.outcome", "error")
        span.set_attribute("error.type", _qualname(type(exc)))
        span.add_event("exception", _exception_texts(exc, message))
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"[:1000]))
    except Exception:  # tracing must never change what the job did
        log.debug("recording a job's failure on its span failed", exc_info=True)


def _exception_texts(exc: BaseException, message: str) -> dict[str, Any]:
    """The exception event's attributes (the semantic conventions' names), texts as valid
    UTF-8: OTLP (protobuf strings) refuses lone surrogates (a non-UTF-8 file name in a
    message) and would drop the whole export batch."""
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "exception.type": _qualname(type(exc)),
        "exception.message": message,
        "exception.stacktrace": safe_text(stack),
        "exception.escaped": "True",  # it left the span's scope: the handler raised it
    }


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
