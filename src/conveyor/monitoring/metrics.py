"""Metrics stored in the broker: per-minute counters and histograms per queue and task.

``MetricsMiddleware`` (one of ``conveyor.default_middleware()``) counts enqueues and job
outcomes, and records run time and wait time (ready → started) in fixed histogram buckets.
Increments are buffered in memory and written with ``SideStores.counters.add`` at most once per
``flush_interval`` second, into two places:

* ``metrics:m:<minute>`` — one bucket per minute, kept 24 h: throughput, failure rate and
  percentiles over any window of the last day;
* ``metrics:total`` — cumulative totals: monotonic Prometheus counters and histograms.

Each flush also feeds the processed / failed history (``history.py``: per minute for a day,
per hour for a week) behind the dashboard's charts.

Counter names inside a bucket are ``<queue>|<task>|<name>`` (queue and task names cannot contain
``|``). ``summarize`` (``metrics_read.py``, re-exported here) turns counters into rates and
p50/p95/p99; ``ConveyorCollector`` is a prometheus-client collector that also reads live gauges
(jobs by state, oldest pending age, dead letters, live workers, firing alerts) from the broker
at scrape time.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.job import Job
from ..middleware import AppView, Middleware, WorkerView
from ..outage import OutageLog
from .history import write_history
from .metrics_read import (
    BUCKET_TTL,
    FAILED_OUTCOMES,
    HISTOGRAM_BOUNDS,
    OUTCOMES,
    RETENTION_SECONDS,
    TOTALS_BUCKET,
    TOTALS_TTL,
    Summary,
    bucket_name,
    group_counters,
    histogram_buckets,
    histogram_index,
    job_increments,
    minute_of,
    percentile,
    read_counters,
    read_totals,
    series,
    summarize,
)

if TYPE_CHECKING:
    from ..broker.side import SideStores

__all__ = [  # the read side lives in metrics_read.py; callers import it from here too
    "BUCKET_TTL",
    "FAILED_OUTCOMES",
    "HISTOGRAM_BOUNDS",
    "OUTCOMES",
    "RETENTION_SECONDS",
    "TOTALS_BUCKET",
    "TOTALS_TTL",
    "MetricsMiddleware",
    "Summary",
    "bucket_name",
    "flush_local",
    "group_counters",
    "histogram_buckets",
    "histogram_index",
    "job_increments",
    "minute_of",
    "percentile",
    "read_counters",
    "read_totals",
    "series",
    "summarize",
]

log = logging.getLogger("conveyor.metrics")

_BOUNDS = len(HISTOGRAM_BOUNDS) + 1  # histogram buckets, +Inf included
_bisect = bisect.bisect_left


class _Tally:
    """The increments of one (minute, queue, task), kept as numbers until the next flush.

    ``after_process`` runs once per job on a busy worker: it adds to these fields instead of
    building the named counters (``job_increments``) job by job; ``items`` names them at flush.
    """

    __slots__ = ("outcomes", "run_b", "run_n", "run_sum", "wait_b", "wait_n", "wait_sum")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.run_n = self.wait_n = 0
        self.run_sum = self.wait_sum = 0.0
        self.run_b = [0] * _BOUNDS
        self.wait_b = [0] * _BOUNDS

    def items(self) -> Iterator[tuple[str, float]]:
        processed = failed = 0
        for name, n in self.outcomes.items():
            if name in ("enqueued", "released"):  # not attempts that finished
                yield name, float(n)
                continue
            processed += n
            failed += n if name in FAILED_OUTCOMES else 0
            yield name, float(n)
        if processed:
            yield "processed", float(processed)
        if failed:
            yield "failed", float(failed)
        for prefix, count, total, buckets in (
            ("run", self.run_n, self.run_sum, self.run_b),
            ("wait", self.wait_n, self.wait_sum, self.wait_b),
        ):
            if count:
                yield f"{prefix}_n", float(count)
                yield f"{prefix}_sum", total
                for i, n in enumerate(buckets):
                    if n:
                        yield f"{prefix}_b{i}", float(n)


class MetricsMiddleware(Middleware):
    """Counts enqueues and outcomes into per-minute broker buckets (buffered, thread-safe)."""

    def __init__(self, flush_interval: float = 1.0) -> None:
        self.flush_interval = flush_interval
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, float]] = {}
        self._tallies: dict[tuple[int, str, str], _Tally] = {}
        self._broker: SideStores | None = None
        self._now = 0.0
        self._timer: threading.Timer | None = None
        _LIVE.add(self)

    # ------------------------------------------------------------------ hooks
    def after_enqueue(self, app: AppView, job: Job, duplicate: bool) -> None:
        """Count a stored job (duplicates are not new jobs)."""
        if not duplicate:
            self.add(app.broker, app.now(), job.queue, job.task, {"enqueued": 1.0})

    def after_enqueue_batch(
        self, app: AppView, jobs: Sequence[Job], duplicates: Sequence[bool]
    ) -> None:
        """``after_enqueue`` for a whole ``enqueue_many`` batch, under one lock."""
        if type(self).after_enqueue is not MetricsMiddleware.after_enqueue:
            super().after_enqueue_batch(app, jobs, duplicates)  # a subclass's own hook
            return
        now = app.now()
        with self._lock:
            self._use(app.broker, now)
            minute = int(now // 60)
            tallies = self._tallies
            for job, duplicate in zip(jobs, duplicates, strict=True):
                if duplicate:
                    continue
                key = (minute, job.queue, job.task)
                tally = tallies.get(key)
                if tally is None:
                    tally = tallies[key] = _Tally()
                outcomes = tally.outcomes
                outcomes["enqueued"] = outcomes.get("enqueued", 0) + 1
            self._schedule()

    def after_process(
        self,
        worker: WorkerView,
        job: Job,
        *,
        outcome: str,
        duration: float,
        error: BaseException | None,
    ) -> None:
        """Count the outcome and record run and wait times (same counters as job_increments)."""
        self._count(worker, [job], [duration], outcome)

    def after_process_batch(
        self, worker: WorkerView, jobs: Sequence[Job], durations: Sequence[float]
    ) -> None:
        """``after_process(outcome="completed")`` for a batch of jobs, under one lock."""
        if type(self).after_process is not MetricsMiddleware.after_process:
            super().after_process_batch(worker, jobs, durations)  # a subclass's own hook
            return
        self._count(worker, jobs, durations, "completed")

    def _count(
        self, worker: WorkerView, jobs: Sequence[Job], durations: Sequence[float], outcome: str
    ) -> None:
        now = worker.runtime.now()
        minute = int(now // 60)
        with self._lock:
            broker = worker.runtime.broker
            if self._broker is not broker:
                self._use(broker, now)
            elif now > self._now:
                self._now = now
            tallies = self._tallies
            tally: _Tally | None = None
            tally_key: tuple[int, str, str] | None = None
            for job, duration in zip(jobs, durations, strict=True):
                key = (minute, job.queue, job.task)
                if key != tally_key:
                    tally_key = key
                    tally = tallies.get(key)
                    if tally is None:
                        tally = tallies[key] = _Tally()
                assert tally is not None
                run = duration if duration > 0 else None
                started = job.started_at
                if run is None and started is not None:
                    run = max(0.0, now - started)
                outcomes = tally.outcomes
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                if run is not None and outcome != "lease_lost":
                    tally.run_n += 1
                    tally.run_sum += run
                    tally.run_b[_bisect(HISTOGRAM_BOUNDS, run)] += 1
                if started is not None:
                    ready = job.run_at or 0.0
                    created = job.created_at or 0.0
                    wait = started - (ready if ready > created else created)
                    if wait < 0.0:
                        wait = 0.0
                    tally.wait_n += 1
                    tally.wait_sum += wait
                    tally.wait_b[_bisect(HISTOGRAM_BOUNDS, wait)] += 1
            if self._timer is None or self.flush_interval <= 0:
                self._schedule()

    def on_release(self, worker: WorkerView, job: Job) -> None:
        """Count a job released unfinished at shutdown (counter ``released``; not processed)."""
        now = worker.runtime.now()
        with self._lock:
            self._use(worker.runtime.broker, now)
            key = (int(now // 60), job.queue, job.task)
            tally = self._tallies.get(key)
            if tally is None:
                tally = self._tallies[key] = _Tally()
            tally.outcomes["released"] = tally.outcomes.get("released", 0) + 1
            self._schedule()

    def on_worker_stop(self, worker: WorkerView) -> None:
        """Write what is buffered before the worker exits."""
        self.flush()

    # ------------------------------------------------------------------ buffer
    def add(
        self, broker: SideStores, now: float, queue: str, task: str, increments: Mapping[str, float]
    ) -> None:
        """Buffer increments for the minute of ``now``; flushed within ``flush_interval``."""
        prefix = f"{queue}|{task}|"
        with self._lock:
            self._use(broker, now)
            bucket = self._pending.setdefault(bucket_name(minute_of(now)), {})
            for name, amount in increments.items():
                bucket[prefix + name] = bucket.get(prefix + name, 0.0) + amount
            self._schedule()

    def _use(self, broker: SideStores, now: float) -> None:
        """Lock held: buffer for ``broker`` (what was buffered for another one is written)."""
        if self._broker is not None and self._broker is not broker:
            self._flush_locked()
        self._broker = broker
        self._now = max(self._now, now)

    def _schedule(self) -> None:
        """Lock held: flush now (``flush_interval <= 0``) or start the flush timer."""
        if self.flush_interval <= 0:
            self._flush_locked()
        elif self._timer is None:
            self._timer = threading.Timer(self.flush_interval, self.flush)
            self._timer.daemon = True
            self._timer.start()

    def flush(self, *, quiet: bool = False) -> None:
        """Write every buffered increment to the broker now (``quiet``: no traceback on error)."""
        with self._lock:
            self._flush_locked(quiet)

    def _collect(self) -> dict[str, dict[str, float]]:
        """Lock held: take the buffered increments as ``{bucket: {counter: amount}}``."""
        pending, self._pending = self._pending, {}
        tallies, self._tallies = self._tallies, {}
        for (minute, queue, task), tally in tallies.items():
            bucket = pending.setdefault(bucket_name(minute), {})
            prefix = f"{queue}|{task}|"
            for name, amount in tally.items():
                bucket[prefix + name] = bucket.get(prefix + name, 0.0) + amount
        return pending

    def _flush_locked(self, quiet: bool = False) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = self._collect()
        broker = self._broker
        if not pending or broker is None or getattr(broker, "_closed", False):
            return  # nothing to write, or the app was closed: drop rather than reconnect
        totals: dict[str, float] = {}
        try:
            for bucket, values in sorted(pending.items()):
                broker.counters.add(bucket, values, self._now, BUCKET_TTL)
                for key, amount in values.items():
                    totals[key] = totals.get(key, 0.0) + amount
            broker.counters.add(TOTALS_BUCKET, totals, self._now, TOTALS_TTL)
            write_history(broker, pending, self._now)
        except Exception as exc:  # a metrics write must never break a worker
            if quiet or not OutageLog.shared(broker).failed(exc, "metrics", log):
                log.log(
                    logging.DEBUG if quiet else logging.WARNING,
                    "could not write metrics to the broker",
                    exc_info=not quiet,
                )


_LIVE: weakref.WeakSet[MetricsMiddleware] = weakref.WeakSet()


@atexit.register
def _flush_all_at_exit() -> None:  # pragma: no cover - runs at interpreter exit
    # Best effort within a small budget: a broker that is already gone must not stall exit.
    deadline = time.monotonic() + 2.0
    for mw in list(_LIVE):
        if time.monotonic() > deadline:
            break
        mw.flush(quiet=True)


def flush_local(app: Any) -> None:
    """Flush this process's buffered metrics of ``app`` (so reads see its latest counts)."""
    for mw in app.middleware:
        if isinstance(mw, MetricsMiddleware):
            mw.flush()
