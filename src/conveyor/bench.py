"""``conveyor bench``: a quick measurement of Conveyor on the user's own broker.

It uses its own queue (``conveyor-bench``) and task, never flushes anything, and reports
single and bulk enqueue rates, the drain rate of one in-process worker, and pickup latency
at light load. The side-by-side comparison with other systems lives in ``bench/``.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

from .app import Conveyor
from .core.state import JobState

BENCH_QUEUE = "conveyor-bench"
_starts: dict[int, float] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class BenchResult:
    """Rates (jobs/s) and latencies (ms) from one run."""

    url: str
    enqueue_per_s: float
    bulk_enqueue_per_s: float
    drain_per_s: float
    pickup_p50_ms: float
    pickup_p99_ms: float
    jobs: int


def _register(app: Conveyor) -> None:
    @app.task(name="conveyor_bench.noop", queue=BENCH_QUEUE, max_attempts=1)
    def noop(n: int, t_enq: float) -> None:
        with _lock:
            _starts[n] = time.time() - t_enq


def run_bench(url: str | None, jobs: int = 5000, concurrency: int = 16) -> BenchResult:
    """Measure enqueue, bulk enqueue, drain and pickup latency against ``url``."""
    app = Conveyor(url)
    _register(app)
    task = app.tasks["conveyor_bench.noop"]
    app.pause(BENCH_QUEUE)  # fill first, then measure the drain alone
    t0 = time.perf_counter()
    for i in range(jobs):
        task.enqueue(i, 0.0)
    single = jobs / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for start in range(jobs, 3 * jobs, 1000):
        app.enqueue_many([task.spec(i, 0.0) for i in range(start, min(start + 1000, 3 * jobs))])
    bulk = 2 * jobs / (time.perf_counter() - t0)
    drain = _drain(app, 3 * jobs, concurrency)
    p50, p99 = _latency(app, concurrency)
    app.close()
    return BenchResult(app.broker.url or str(url), single, bulk, drain, p50, p99, 3 * jobs)


def _drain(app: Conveyor, total: int, concurrency: int) -> float:
    worker = app.worker(queues=[BENCH_QUEUE], concurrency=concurrency)
    thread = threading.Thread(target=worker.run, daemon=True)
    _starts.clear()
    thread.start()
    t0 = time.perf_counter()
    app.resume(BENCH_QUEUE)
    deadline = time.monotonic() + 300
    while _pending(app) and time.monotonic() < deadline:
        time.sleep(0.05)
    rate = len(_starts) / (time.perf_counter() - t0)
    worker.stop(timeout=5)
    thread.join(timeout=10)
    return rate


def _pending(app: Conveyor) -> int:
    counts = app.broker.counts().get(BENCH_QUEUE, {})
    return sum(counts.get(str(s), 0) for s in (JobState.PENDING, JobState.ACTIVE))


def _latency(app: Conveyor, concurrency: int, n: int = 200) -> tuple[float, float]:
    worker = app.worker(queues=[BENCH_QUEUE], concurrency=concurrency)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    _starts.clear()
    task = app.tasks["conveyor_bench.noop"]
    for i in range(n):
        task.enqueue(i, time.time())
        time.sleep(0.01)  # light load: one job every 10 ms is what is being measured
    deadline = time.monotonic() + 30
    while len(_starts) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    worker.stop(timeout=5)
    thread.join(timeout=10)
    lat = sorted(v * 1000 for v in _starts.values())
    if not lat:
        return float("nan"), float("nan")
    return statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]
