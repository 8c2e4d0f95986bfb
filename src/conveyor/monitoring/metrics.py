"""Metrics stored in the broker: per-minute counters and histograms per queue and task.

``MetricsMiddleware`` (installed on every app) counts enqueues and job outcomes, and records
run time and wait time (ready → started) in fixed histogram buckets. Increments are buffered
in memory and written with ``Broker.counters_add`` at most once per ``flush_interval`` second,
into two places:

* ``metrics:m:<minute>`` — one bucket per minute, kept 24 h: throughput, failure rate and
  percentiles over any window of the last day;
* ``metrics:total`` — cumulative totals: monotonic Prometheus counters and histograms.

Counter names inside a bucket are ``<queue>|<task>|<name>`` (queue and task names cannot contain
``|``). ``summarize`` turns counters into rates and p50/p95/p99; ``ConveyorCollector`` is a
prometheus-client collector that also reads live gauges (jobs by state, oldest pending age,
dead letters, live workers, firing alerts) from the broker at scrape time.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..core.job import Job
from ..middleware import Middleware

if TYPE_CHECKING:
    from ..app import Conveyor
    from ..broker.base import Broker

log = logging.getLogger("conveyor.metrics")

#: Upper bounds (seconds) of the run-time and wait-time histogram buckets; the last is +Inf.
HISTOGRAM_BOUNDS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
RETENTION_SECONDS = 24 * 3600
BUCKET_TTL = RETENTION_SECONDS + 300.0
TOTALS_BUCKET = "metrics:total"
TOTALS_TTL = 10 * 365 * 24 * 3600.0
OUTCOMES = ("completed", "retry_scheduled", "dead_letter", "lease_lost")
FAILED_OUTCOMES = ("retry_scheduled", "dead_letter")


def minute_of(t: float) -> int:
    """The minute number (epoch seconds // 60) that ``t`` falls in."""
    return int(t // 60)


def bucket_name(minute: int) -> str:
    """The counters bucket of one minute."""
    return f"metrics:m:{minute}"


def histogram_index(seconds: float) -> int:
    """Index of the histogram bucket for ``seconds`` (``len(HISTOGRAM_BOUNDS)`` is +Inf)."""
    return bisect.bisect_left(HISTOGRAM_BOUNDS, max(0.0, seconds))


def job_increments(job: Job, outcome: str, run_seconds: float | None) -> dict[str, float]:
    """The counters one processed job adds: outcome counts, run and wait histograms."""
    inc: dict[str, float] = {"processed": 1.0, outcome: 1.0}
    if outcome in FAILED_OUTCOMES:
        inc["failed"] = 1.0
    if run_seconds is not None and outcome != "lease_lost":
        inc["run_n"] = 1.0
        inc["run_sum"] = run_seconds
        inc[f"run_b{histogram_index(run_seconds)}"] = 1.0
    if job.started_at is not None:
        ready = max(job.run_at or 0.0, job.created_at or 0.0)
        wait = max(0.0, job.started_at - ready)
        inc["wait_n"] = 1.0
        inc["wait_sum"] = wait
        inc[f"wait_b{histogram_index(wait)}"] = 1.0
    return inc


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
            if name == "enqueued":
                yield name, float(n)
                continue
            processed += n
            failed += n if name in FAILED_OUTCOMES else 0
            yield name, float(n)
        if processed:
            yield "processed", float(processed)
        if failed:
            yield "failed", float(failed)
        for prefix, count, total, buckets in (("run", self.run_n, self.run_sum, self.run_b),
                                              ("wait", self.wait_n, self.wait_sum, self.wait_b)):
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
        self._broker: Broker | None = None
        self._now = 0.0
        self._timer: threading.Timer | None = None
        _LIVE.add(self)

    # ------------------------------------------------------------------ hooks
    def after_enqueue(self, app: Any, job: Job, duplicate: bool) -> None:
        """Count a stored job (duplicates are not new jobs)."""
        if not duplicate:
            self.add(app.broker, app.now(), job.queue, job.task, {"enqueued": 1.0})

    def count_enqueued(self, app: Any, jobs: Sequence[Job], results: Sequence[Any],
                       now: float) -> None:  # fmt: skip
        """``after_enqueue`` for a whole ``enqueue_many`` batch (``results``: EnqueueResult)."""
        with self._lock:
            self._use(app.broker, now)
            minute = int(now // 60)
            tallies = self._tallies
            for job, res in zip(jobs, results, strict=True):
                if res.duplicate:
                    continue
                key = (minute, job.queue, job.task)
                tally = tallies.get(key)
                if tally is None:
                    tally = tallies[key] = _Tally()
                outcomes = tally.outcomes
                outcomes["enqueued"] = outcomes.get("enqueued", 0) + 1
            self._schedule()

    def after_process(
        self, worker: Any, job: Job, *, outcome: str, duration: float, error: BaseException | None
    ) -> None:
        """Count the outcome and record run and wait times (same counters as job_increments)."""
        self._count(worker, [job], [duration], outcome)

    def after_process_batch(
        self, worker: Any, jobs: Sequence[Job], durations: Sequence[float]
    ) -> None:
        """``after_process(outcome="completed")`` for a batch of jobs, under one lock."""
        if type(self).after_process is not MetricsMiddleware.after_process:
            for job, duration in zip(jobs, durations, strict=True):  # a subclass's own hook
                self.after_process(worker, job, outcome="completed", duration=duration,
                                   error=None)  # fmt: skip
            return
        self._count(worker, jobs, durations, "completed")

    def _count(
        self, worker: Any, jobs: Sequence[Job], durations: Sequence[float], outcome: str
    ) -> None:
        now = worker.app.now()
        minute = int(now // 60)
        with self._lock:
            broker = worker.app.broker
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

    def on_worker_stop(self, worker: Any) -> None:
        """Write what is buffered before the worker exits."""
        self.flush()

    # ------------------------------------------------------------------ buffer
    def add(
        self, broker: Broker, now: float, queue: str, task: str, increments: Mapping[str, float]
    ) -> None:
        """Buffer increments for the minute of ``now``; flushed within ``flush_interval``."""
        prefix = f"{queue}|{task}|"
        with self._lock:
            self._use(broker, now)
            bucket = self._pending.setdefault(bucket_name(minute_of(now)), {})
            for name, amount in increments.items():
                bucket[prefix + name] = bucket.get(prefix + name, 0.0) + amount
            self._schedule()

    def _use(self, broker: Broker, now: float) -> None:
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
                broker.counters_add(bucket, values, self._now, BUCKET_TTL)
                for key, amount in values.items():
                    totals[key] = totals.get(key, 0.0) + amount
            broker.counters_add(TOTALS_BUCKET, totals, self._now, TOTALS_TTL)
        except Exception:  # a metrics write must never break a worker
            log.log(logging.DEBUG if quiet else logging.WARNING,
                    "could not write metrics to the broker", exc_info=not quiet)  # fmt: skip


_LIVE: weakref.WeakSet[MetricsMiddleware] = weakref.WeakSet()


@atexit.register
def _flush_all_at_exit() -> None:  # pragma: no cover - runs at interpreter exit
    # Best effort within a small budget: a broker that is already gone must not stall exit.
    deadline = time.monotonic() + 2.0
    for mw in list(_LIVE):
        if time.monotonic() > deadline:
            break
        mw.flush(quiet=True)


def flush_local(app: Conveyor) -> None:
    """Flush this process's buffered metrics of ``app`` (so reads see its latest counts)."""
    for mw in app.middleware:
        if isinstance(mw, MetricsMiddleware):
            mw.flush()


# ---------------------------------------------------------------------- reading
@dataclass(frozen=True)
class Summary:
    """Counts, rates and percentiles of one queue/task over a window of minutes."""

    minutes: int
    enqueued: int
    processed: int
    completed: int
    failed: int
    retry_scheduled: int
    dead_letter: int
    lease_lost: int
    throughput_per_minute: float
    failure_rate: float | None  # failed / (completed + failed), None when nothing finished
    run_p50: float | None
    run_p95: float | None
    run_p99: float | None
    run_avg: float | None
    wait_p50: float | None
    wait_p95: float | None
    wait_p99: float | None
    wait_avg: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def read_counters(
    broker: Broker,
    now: float,
    minutes: int,
    *,
    queue: str | None = None,
    task: str | None = None,
    by: str = "all",
) -> dict[str, dict[str, float]]:
    """Sum the last ``minutes`` buckets, grouped ``by`` ``"all"``, ``"queue"`` or ``"task"``."""
    current = minute_of(now)
    names = [bucket_name(m) for m in range(current - max(1, minutes) + 1, current + 1)]
    return group_counters(broker.counters_get(names, now).values(), queue=queue, task=task, by=by)


def read_totals(broker: Broker, now: float) -> dict[str, dict[str, float]]:
    """Cumulative counters grouped by ``"queue|task"``."""
    return group_counters(broker.counters_get([TOTALS_BUCKET], now).values(), by="queue_task")


def group_counters(
    buckets: Iterable[Mapping[str, float]],
    *,
    queue: str | None = None,
    task: str | None = None,
    by: str = "all",
) -> dict[str, dict[str, float]]:
    """Sum ``queue|task|name`` counters over buckets into ``{group: {name: value}}``."""
    out: dict[str, dict[str, float]] = {}
    for values in buckets:
        for key, amount in values.items():
            parts = key.split("|", 2)
            if len(parts) != 3:
                continue
            q, t, name = parts
            if (queue is not None and q != queue) or (task is not None and t != task):
                continue
            group = {"all": "", "queue": q, "task": t}.get(by, f"{q}|{t}")
            slot = out.setdefault(group, {})
            slot[name] = slot.get(name, 0.0) + float(amount)
    return out


def percentile(counters: Mapping[str, float], prefix: str, q: float) -> float | None:
    """The ``q`` quantile (0..1) of histogram ``prefix`` (``run``/``wait``), interpolated."""
    counts = [counters.get(f"{prefix}_b{i}", 0.0) for i in range(len(HISTOGRAM_BOUNDS) + 1)]
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    for i, count in enumerate(counts):
        if count <= 0:
            continue
        if seen + count >= rank:
            if i >= len(HISTOGRAM_BOUNDS):
                return HISTOGRAM_BOUNDS[-1]
            low = HISTOGRAM_BOUNDS[i - 1] if i > 0 else 0.0
            high = HISTOGRAM_BOUNDS[i]
            return low + (high - low) * max(0.0, min(1.0, (rank - seen) / count))
        seen += count
    return HISTOGRAM_BOUNDS[-1]


def summarize(counters: Mapping[str, float], minutes: int) -> Summary:
    """Rates and percentiles from summed counters of a window of ``minutes``."""

    def n(name: str) -> int:
        return round(counters.get(name, 0.0))

    finished = n("completed") + n("failed")

    def avg(prefix: str) -> float | None:
        count = counters.get(f"{prefix}_n", 0.0)
        return counters.get(f"{prefix}_sum", 0.0) / count if count else None

    return Summary(
        minutes=minutes,
        enqueued=n("enqueued"),
        processed=n("processed"),
        completed=n("completed"),
        failed=n("failed"),
        retry_scheduled=n("retry_scheduled"),
        dead_letter=n("dead_letter"),
        lease_lost=n("lease_lost"),
        throughput_per_minute=n("processed") / max(1, minutes),
        failure_rate=(n("failed") / finished) if finished else None,
        run_p50=percentile(counters, "run", 0.5),
        run_p95=percentile(counters, "run", 0.95),
        run_p99=percentile(counters, "run", 0.99),
        run_avg=avg("run"),
        wait_p50=percentile(counters, "wait", 0.5),
        wait_p95=percentile(counters, "wait", 0.95),
        wait_p99=percentile(counters, "wait", 0.99),
        wait_avg=avg("wait"),
    )


def series(
    broker: Broker,
    now: float,
    minutes: int = 60,
    *,
    queue: str | None = None,
    task: str | None = None,
) -> list[dict[str, Any]]:
    """One point per minute (oldest first): ``minute`` start time, processed, failed, enqueued."""
    current = minute_of(now)
    minute_list = list(range(current - max(1, minutes) + 1, current + 1))
    raw = broker.counters_get([bucket_name(m) for m in minute_list], now)
    points = []
    for m in minute_list:
        values = group_counters([raw.get(bucket_name(m), {})], queue=queue, task=task).get("", {})
        points.append(
            {
                "minute": m * 60.0,
                "processed": int(values.get("processed", 0)),
                "failed": int(values.get("failed", 0)),
                "enqueued": int(values.get("enqueued", 0)),
            }
        )
    return points


def histogram_buckets(counters: Mapping[str, float], prefix: str) -> Iterator[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs of a stored histogram, Prometheus style."""
    running = 0.0
    for i, bound in enumerate(HISTOGRAM_BOUNDS):
        running += counters.get(f"{prefix}_b{i}", 0.0)
        yield (repr(float(bound)), running)
    running += counters.get(f"{prefix}_b{len(HISTOGRAM_BOUNDS)}", 0.0)
    yield ("+Inf", running)
