"""Logs, traces and error reports for jobs: ``python examples/observability.py``.

Needs the ``otel`` extra and ``opentelemetry-sdk`` (``pip install "conveyor-jobs[otel]"
opentelemetry-sdk``). It configures JSON logs for Conveyor's and the app's loggers, traces a
"web request" that enqueues a job, runs the job in a worker, and prints the trace: the job's
span is a child of the enqueue span, itself a child of the request. Swap the console exporter
for OTLP in production; add ``SentryMiddleware()`` (extra ``sentry``) the same way.
See docs/observability-integrations.md and docs/operations.md#logs.
"""

from __future__ import annotations

import logging
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import conveyor
from conveyor import Conveyor, default_middleware
from conveyor.contrib.otel import OpenTelemetryMiddleware

exporter = InMemorySpanExporter()  # production: BatchSpanProcessor(OTLPSpanExporter())
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("shop")

app = Conveyor("memory://", middleware=[*default_middleware(), OpenTelemetryMiddleware(provider)])
log = logging.getLogger("shop.emails")


@app.task
def send_receipt(order_id: int) -> None:
    """A handler with its own logging and its own span."""
    log.info("sending the receipt of order %d", order_id)  # carries job_id, task, attempt
    with tracer.start_as_current_span("smtp send"):
        pass


def main() -> list[str]:
    """Run the scenario; return the trace as indented span names (parents first)."""
    conveyor.configure_logging("json", "INFO", stream=sys.stdout)
    with tracer.start_as_current_span("POST /orders"):
        send_receipt.enqueue(42)
    app.worker().run_until_idle()
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}

    def depth(span: object) -> int:
        parent = getattr(span, "parent", None)
        return (
            0 if parent is None or parent.span_id not in by_id else 1 + depth(by_id[parent.span_id])
        )

    return ["  " * depth(s) + s.name for s in sorted(spans, key=depth)]


if __name__ == "__main__":
    for line in main():
        print(line)
