"""Metric names and the read side of the broker-stored metrics (see ``metrics.py``).

Histogram bounds, bucket names, ``job_increments``, and the functions that read counters back:
``read_counters`` / ``read_totals`` sum buckets, ``summarize`` turns counters into rates and
p50/p95/p99, ``series`` and ``histogram_buckets`` feed the dashboard and Prometheus.
``metrics.py`` re-exports all of them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..broker.side import SideStores
    from ..core.job import Job

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
#: Jobs a worker gave back unfinished at shutdown (not an outcome: they run again elsewhere).
RELEASED = "released"


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
    released: int = 0  # given back unfinished at shutdown (not counted as processed)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def read_counters(
    broker: SideStores,
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
    return group_counters(broker.counters.get(names, now).values(), queue=queue, task=task, by=by)


def read_totals(broker: SideStores, now: float) -> dict[str, dict[str, float]]:
    """Cumulative counters grouped by ``"queue|task"``."""
    return group_counters(broker.counters.get([TOTALS_BUCKET], now).values(), by="queue_task")


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
        released=n(RELEASED),
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
    broker: SideStores,
    now: float,
    minutes: int = 60,
    *,
    queue: str | None = None,
    task: str | None = None,
) -> list[dict[str, Any]]:
    """One point per minute (oldest first): ``minute`` start time, processed, failed, enqueued."""
    current = minute_of(now)
    minute_list = list(range(current - max(1, minutes) + 1, current + 1))
    raw = broker.counters.get([bucket_name(m) for m in minute_list], now)
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
