"""Prometheus exposition via prometheus-client: a custom collector that reads the broker.

Every scrape reads live gauges (jobs by queue and state, paused queues, oldest pending age,
dead letters, live workers per queue, firing alerts) and the cumulative counters and
histograms that ``MetricsMiddleware`` stores, so any process — the dashboard's ``/metrics``
or ``conveyor worker --metrics-port`` — exposes the same numbers for the whole system.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..core.escapes import escape_invisible
from ..core.state import JobState
from ..runtime import as_runtime
from . import admin
from .admin import worker_queues  # re-exported: it lived here before
from .metrics import OUTCOMES, flush_local, histogram_buckets, read_totals

if TYPE_CHECKING:
    from ..runtime import HasRuntime, Runtime

log = logging.getLogger("conveyor.metrics")


class ConveyorCollector:
    """A prometheus-client collector for one app (register it in a ``CollectorRegistry``)."""

    def __init__(self, app: Runtime | HasRuntime) -> None:
        self.app = as_runtime(app)  # the runtime

    def describe(self) -> list[Metric]:
        """Nothing up front: the metrics are only known at scrape time."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Read the broker and yield every metric family (label values made visible)."""
        for family in self._collect():
            yield visible_labels(family)

    def _collect(self) -> Iterator[Metric]:
        app = self.app
        flush_local(app)
        now = app.now()
        broker = app.broker
        counts = broker.counts()
        paused = broker.paused_queues()
        jobs = GaugeMetricFamily(
            "conveyor_jobs", "Jobs stored, by queue and state.", labels=["queue", "state"]
        )
        paused_g = GaugeMetricFamily(
            "conveyor_queue_paused", "1 when the queue is paused.", labels=["queue"]
        )
        depth = GaugeMetricFamily(
            "conveyor_queue_depth", "Pending (ready) jobs per queue.", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "conveyor_queue_oldest_pending_age_seconds",
            "Age of the oldest pending job since it became ready (0 when none).",
            labels=["queue"],
        )
        dead = GaugeMetricFamily(
            "conveyor_dead_letters", "Jobs in the dead-letter queue.", labels=["queue"]
        )
        for queue in sorted(counts):
            for state in JobState:
                jobs.add_metric([queue, state.value], counts[queue].get(state.value, 0))
            paused_g.add_metric([queue], 1.0 if queue in paused else 0.0)
            depth.add_metric([queue], counts[queue].get("pending", 0))
            ready = broker.oldest_pending(queue)
            oldest.add_metric([queue], max(0.0, now - ready) if ready is not None else 0.0)
            dead.add_metric([queue], counts[queue].get("dead_letter", 0))
        yield from (jobs, paused_g, depth, oldest, dead)
        yield self._workers(list(counts))
        if getattr(broker, "supports_flow", False):
            yield from flow_metrics(broker.flow_status(now))
        yield from self._totals(now)
        alerts = self._alerts()
        if alerts is not None:
            yield alerts

    def _workers(self, queues: list[str]) -> Metric:
        family = GaugeMetricFamily(
            "conveyor_workers", "Live workers serving each queue.", labels=["queue"]
        )
        per_queue: dict[str, int] = dict.fromkeys(queues, 0)
        for worker in admin.workers(self.app):
            for queue in worker_queues(worker):
                per_queue[queue] = per_queue.get(queue, 0) + 1
        for queue, n in sorted(per_queue.items()):
            family.add_metric([queue], n)
        return family

    def _totals(self, now: float) -> Iterator[Metric]:
        totals = read_totals(self.app.broker, now)
        enq = CounterMetricFamily(
            "conveyor_jobs_enqueued", "Jobs enqueued.", labels=["queue", "task"]
        )
        done = CounterMetricFamily(
            "conveyor_jobs_processed",
            "Job attempts finished, by outcome.",
            labels=["queue", "task", "outcome"],
        )
        run = HistogramMetricFamily(
            "conveyor_job_run_seconds", "Time a job attempt ran.", labels=["queue", "task"]
        )
        wait = HistogramMetricFamily(
            "conveyor_job_wait_seconds",
            "Time from ready to started (queueing delay).",
            labels=["queue", "task"],
        )
        released = CounterMetricFamily(
            "conveyor_jobs_released",
            "Jobs a worker gave back unfinished at shutdown (they run again; not processed).",
            labels=["queue", "task"],
        )
        for group, values in sorted(totals.items()):
            queue, _, task = group.partition("|")
            enq.add_metric([queue, task], values.get("enqueued", 0.0))
            released.add_metric([queue, task], values.get("released", 0.0))
            for outcome in OUTCOMES:
                done.add_metric([queue, task, outcome], values.get(outcome, 0.0))
            if values.get("run_n"):
                run.add_metric(
                    [queue, task],
                    list(histogram_buckets(values, "run")),
                    values.get("run_sum", 0.0),
                )
            if values.get("wait_n"):
                wait.add_metric(
                    [queue, task],
                    list(histogram_buckets(values, "wait")),
                    values.get("wait_sum", 0.0),
                )
        yield from (enq, done, released, run, wait)

    def _alerts(self) -> Metric | None:
        try:
            alerts = self.app.alerts
            states = alerts.states() if alerts is not None else []
        except Exception:  # alerts are optional for a scrape
            log.debug("alert states unavailable", exc_info=True)
            return None
        family = GaugeMetricFamily(
            "conveyor_alerts_firing", "Alerts firing (unacknowledged).", labels=["rule"]
        )
        per_rule: dict[str, int] = {}
        for state in states:
            per_rule.setdefault(state.rule, 0)
            if state.state == "firing":
                per_rule[state.rule] += 1
        for rule, n in sorted(per_rule.items()):
            family.add_metric([rule], n)
        return family


#: Series per flow-control metric and scrape at most (per-key limits and fair groups: 10,000
#: tenants must not make 10,000 series). ``conveyor_limit_waiting``: the groups with the most
#: waiting jobs keep their own series, the rest are summed per queue into ``group="(other)"``
#: (``conveyor_limit_waiting_groups`` counts them all); ``conveyor_limit_running``: the slots
#: with the most running jobs, the rest summed into ``slot="(other)"``;
#: ``conveyor_limit_tokens``: the buckets with the fewest tokens (the ones throttling).
WAITING_SERIES = 50
OTHER_GROUP = "(other)"


def flow_metrics(status: dict[str, Any], top: int = WAITING_SERIES) -> Iterator[Metric]:
    """Flow control (issue 15): tokens per bucket, running per slot, waiting per group (the
    ``top`` series of each, see ``WAITING_SERIES``) and the number of waiting groups."""
    tokens = GaugeMetricFamily(
        "conveyor_limit_tokens", "Tokens left in a rate-limit bucket.", labels=["bucket"]
    )
    lowest = sorted(status["buckets"].items(), key=lambda kv: (float(kv[1]), kv[0]))
    for name, value in lowest[:top]:
        tokens.add_metric([name], float(value))
    running = GaugeMetricFamily(
        "conveyor_limit_running", "Jobs holding a concurrency slot.", labels=["slot"]
    )
    busiest = sorted(status["running"].items(), key=lambda kv: (-len(kv[1]), kv[0]))
    for name, ids in busiest[:top]:
        running.add_metric([name], float(len(ids)))
    if len(busiest) > top:
        running.add_metric([OTHER_GROUP], float(sum(len(ids) for _, ids in busiest[top:])))
    waiting = GaugeMetricFamily(
        "conveyor_limit_waiting",
        "Pending jobs of a flow-control group, with why they wait ('' when not held back).",
        labels=["queue", "group", "why"],
    )
    groups = sorted(status["groups"], key=lambda g: (-g["waiting"], g["queue"], g["group"]))
    other: dict[str, float] = {}
    counted: dict[str, float] = {}
    for i, group in enumerate(groups):
        queue = group["queue"]
        counted[queue] = counted.get(queue, 0) + 1
        if i < top:
            waiting.add_metric([queue, group["group"], group["why"] or ""], group["waiting"])
        else:
            other[queue] = other.get(queue, 0) + group["waiting"]
    for queue, n in sorted(other.items()):
        waiting.add_metric([queue, OTHER_GROUP, ""], n)
    count = GaugeMetricFamily(
        "conveyor_limit_waiting_groups", "Flow-control groups with waiting jobs.", labels=["queue"]
    )
    for queue, n in sorted(counted.items()):
        count.add_metric([queue], n)
    yield from (tokens, running, waiting, count)


#: Label characters shown as escapes (``\\x1b``, ``\\u202e``), as the CLI and the pages show
#: them: a task name stored by another client may hold terminal escapes, NUL, BEL or bidi
#: overrides, and ``curl /metrics`` in a terminal ran them (the format escapes only ``\\``,
#: ``"`` and newlines).
def _visible(text: str) -> str:
    return escape_invisible(text)


def visible_labels(family: Metric) -> Metric:
    """``family`` with every label value's invisible characters as escapes."""
    family.samples = [
        s._replace(labels={k: _visible(v) for k, v in s.labels.items()}) for s in family.samples
    ]
    return family


def registry_for(app: Runtime | HasRuntime) -> CollectorRegistry:
    """A fresh registry holding only this app's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ConveyorCollector(app))
    return registry


def exposition(app: Runtime | HasRuntime) -> tuple[bytes, str]:
    """The text exposition of every metric and its content type."""
    return generate_latest(registry_for(app)), CONTENT_TYPE_LATEST


def start_metrics_server(app: Runtime | HasRuntime, port: int, addr: str = "127.0.0.1") -> Any:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread (``worker --metrics-port``),
    with the Kubernetes probes ``/healthz`` and ``/readyz`` apart from it (``health``).

    Returns ``(server, thread)`` as ``prometheus_client.start_http_server`` did.
    """
    from .health import start_probe_server

    registry = registry_for(app)
    return start_probe_server(
        app, port, addr, metrics=lambda: (generate_latest(registry), CONTENT_TYPE_LATEST)
    )
