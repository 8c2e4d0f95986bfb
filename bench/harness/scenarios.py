"""The measurements. Each scenario takes an adapter and sizes and returns a JSON-able dict.

Every scenario starts and ends with FLUSHDB on the system's database, uses a fresh job log,
and stops every worker it started. Job numbers ``>= WARMUP`` are warm-up jobs (excluded).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bench.harness.adapter import Adapter
from bench.harness.joblog import JobLog, percentile

WARMUP = 1_000_000


@dataclass(frozen=True)
class Sizes:
    """Job counts and timings of one run (``QUICK`` for ``--quick``)."""

    enqueue: int = 10_000
    bulk: int = 20_000
    bulk_batch: int = 1_000
    drain: int = 20_000
    tune: int = 5_000
    tune_repeat: int = 3
    latency: int = 300
    latency_interval: float = 0.010
    io: int = 5_000
    io_sleep: float = 0.010
    crash: int = 200
    crash_sleep: float = 0.050
    crash_kill_after: float = 1.0
    crash_window: float = 60.0
    crash_idle: float = 15.0
    rss_idle: float = 3.0


FULL = Sizes()
QUICK = Sizes(enqueue=2_000, bulk=5_000, drain=5_000, tune=2_000, io=1_000)

Result = dict[str, Any]


def _log(adapter: Adapter, label: str) -> JobLog:
    path = adapter.ctx.workdir / f"{adapter.name}-{label}-{time.monotonic_ns()}.jobs"
    path.touch()
    return JobLog(path)


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds and seconds > 0 and not math.isnan(seconds) else math.nan


def _sized(adapter: Adapter, key: str, wanted: int) -> tuple[int, Result]:
    n = adapter.cap(key, wanted)
    return n, ({"reduced_from": wanted} if n < wanted else {})


def _warm_up(adapter: Adapter, log: JobLog, proc: Any, timeout: float = 60.0) -> None:
    """Enqueue 3 jobs and wait until they ran: the worker is up and connected."""
    adapter.enqueue_one(3, start=WARMUP)
    if not adapter.wait_drained(log, range(WARMUP, WARMUP + 3), timeout, stall=None, proc=proc):
        raise TimeoutError(f"worker did not run warm-up jobs within {timeout}s")


def enqueue(adapter: Adapter, sizes: Sizes) -> Result:
    """Enqueue rate: one call per job, one producer process, no worker running."""
    n, extra = _sized(adapter, "enqueue", sizes.enqueue)
    adapter.flush()
    res = adapter.enqueue_one(n)
    adapter.flush()
    return asdict(res) | extra


def bulk(adapter: Adapter, sizes: Sizes) -> Result:
    """Bulk enqueue rate with the system's bulk API (batches of ``bulk_batch``)."""
    n, extra = _sized(adapter, "bulk", sizes.bulk)
    adapter.flush()
    res = adapter.enqueue_bulk(n, batch=sizes.bulk_batch)
    adapter.flush()
    if res is None:
        return {"skipped": "no bulk API"}
    return asdict(res) | {"batch": sizes.bulk_batch} | extra


def drain_mode(
    adapter: Adapter, mode: str, count: int, *, sleep_s: float = 0.0, timeout: float = 900.0
) -> Result:
    """Queue ``count`` jobs, start one worker in ``mode``, time first start -> last finish."""
    adapter.flush()
    adapter.prefill(count, sleep_s=sleep_s)
    log = _log(adapter, f"drain-{mode}")
    t_spawn = time.time()
    proc = adapter.start_worker(mode, log.path)
    try:
        complete = adapter.wait_drained(log, range(count), timeout, stall=30.0, proc=proc)
    finally:
        adapter.stop_worker(proc)
    log.poll()
    done = log.finished(range(count))
    span = log.span(range(count))
    dups = log.duplicated(range(count))
    out: Result = {
        "mode": mode,
        "worker": adapter.describe_mode(mode),
        "count": count,
        "finished": done,
        "complete": complete,
        "span_s": span,
        "rate": _rate(done, span),
        "wall_s_incl_startup": (log.last_finish or t_spawn) - t_spawn,
        "duplicated": len(dups),
        "duplicated_sample": dups[:10],
    }
    adapter.flush()
    return out


def drain(adapter: Adapter, sizes: Sizes) -> Result:
    """Drain rate of pre-queued no-op jobs, one worker process, default and best settings."""
    out: Result = {}
    for mode in ("default", "best"):
        n, extra = _sized(adapter, f"drain:{mode}", sizes.drain)
        out[mode] = drain_mode(adapter, mode, n) | extra
    return out


def tune(adapter: Adapter, sizes: Sizes) -> Result:
    """Drain rate of every candidate setting, ``tune_repeat`` interleaved rounds, median kept.

    Used to choose each adapter's ``best`` mode; not part of the default run.
    """
    modes = ("default", "best", *adapter.tuning_modes)
    n, extra = _sized(adapter, "tune", sizes.tune)
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(sizes.tune_repeat):
        for mode in modes:
            rates[mode].append(drain_mode(adapter, mode, n)["rate"])
    return {
        m: {
            "mode": m,
            "worker": adapter.describe_mode(m),
            "count": n,
            "rate": statistics.median(r),
            "rates": r,
        }
        | extra
        for m, r in rates.items()
    }


def latency_mode(adapter: Adapter, mode: str, sizes: Sizes) -> Result:
    """Pickup latency at light load: jobs enqueued every ``latency_interval`` to an idle worker."""
    adapter.flush()
    log = _log(adapter, f"latency-{mode}")
    proc = adapter.start_worker(mode, log.path)
    try:
        _warm_up(adapter, log, proc)
        time.sleep(0.5)
        prod = adapter.enqueue_paced(sizes.latency, sizes.latency_interval)
        complete = adapter.wait_drained(log, range(sizes.latency), 60.0, stall=20.0, proc=proc)
    finally:
        adapter.stop_worker(proc)
    lat = log.pickup_latencies(range(sizes.latency))
    last_enq = max(log.enqueued_at.get(n, 0.0) for n in range(sizes.latency))
    last_start = max(
        (ts[0] for n, ts in log.starts.items() if n < sizes.latency and ts), default=math.nan
    )
    adapter.flush()
    return {
        "mode": mode,
        "worker": adapter.describe_mode(mode),
        "count": sizes.latency,
        "interval_ms": sizes.latency_interval * 1000,
        "complete": complete,
        "measured": len(lat),
        "p50_ms": percentile(lat, 50) * 1000,
        "p90_ms": percentile(lat, 90) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": (lat[-1] * 1000) if lat else math.nan,
        "producer_elapsed_s": prod.elapsed,
        # the worker could not keep up with one job per interval: latency includes queueing
        "saturated": bool(last_start - last_enq > 1.0),
    }


def latency(adapter: Adapter, sizes: Sizes) -> Result:
    """Pickup latency p50/p99 (enqueue -> job start), default and best worker settings."""
    return {mode: latency_mode(adapter, mode, sizes) for mode in ("default", "best")}


def io(adapter: Adapter, sizes: Sizes) -> Result:
    """I/O-bound: jobs sleeping ``io_sleep``, one worker process at concurrency 100."""
    n, extra = _sized(adapter, "io", sizes.io)
    res = drain_mode(adapter, "io", n, sleep_s=sizes.io_sleep)
    ideal = adapter.io_concurrency / sizes.io_sleep
    return (
        res
        | extra
        | {
            "concurrency": adapter.io_concurrency,
            "sleep_ms": sizes.io_sleep * 1000,
            "ideal_rate": ideal,
        }
    )


def rss(adapter: Adapter, sizes: Sizes) -> Result:
    """Idle worker RSS of the whole process tree after warm-up, default and best settings."""
    out: Result = {}
    for mode in ("default", "best"):
        adapter.flush()
        log = _log(adapter, f"rss-{mode}")
        proc = adapter.start_worker(mode, log.path)
        try:
            _warm_up(adapter, log, proc)
            time.sleep(sizes.rss_idle)
            total, nproc = adapter.worker_rss(proc)
        finally:
            adapter.stop_worker(proc)
        out[mode] = {
            "mode": mode,
            "worker": adapter.describe_mode(mode),
            "rss_mb": total / 2**20,
            "processes": nproc,
        }
    adapter.flush()
    return out


def crash(adapter: Adapter, sizes: Sizes) -> Result:
    """kill -9 the worker tree 1 s after the first job started, start another, count damage.

    The second worker runs until every job finished, or nothing was started or finished for
    ``crash_idle`` seconds, or ``crash_window`` seconds passed. Lost = job numbers never
    finished by then (a job redelivered only after a longer visibility timeout counts as
    lost); duplicated = job numbers started more than once (from the shared job log).
    """
    count = sizes.crash
    adapter.flush()
    adapter.prefill(count, sleep_s=sizes.crash_sleep)
    log = _log(adapter, "crash")
    proc = adapter.start_worker(adapter.crash_mode, log.path)
    try:
        deadline = time.monotonic() + 60
        while log.first_start is None and time.monotonic() < deadline and proc.poll() is None:
            log.poll()
            time.sleep(0.01)
        if log.first_start is None:
            raise TimeoutError("first worker never started a job")
        time.sleep(max(0.0, log.first_start + sizes.crash_kill_after - time.time()))
    finally:
        adapter.kill_worker(proc)
    log.poll()
    started_before = sum(1 for n in range(count) if log.starts.get(n))
    finished_before = log.finished(range(count))
    in_flight = started_before - finished_before
    t_restart = time.monotonic()
    proc2 = adapter.start_worker(adapter.crash_mode, log.path)
    try:
        complete = adapter.wait_drained(
            log, range(count), sizes.crash_window, stall=sizes.crash_idle, proc=proc2
        )
        recovered_in = time.monotonic() - t_restart
    finally:
        adapter.stop_worker(proc2)
    log.poll()
    lost, dups = log.lost(range(count)), log.duplicated(range(count))
    twice = [n for n in range(count) if log.finishes.get(n, 0) > 1]
    adapter.flush()
    return {
        "count": count,
        "job_ms": sizes.crash_sleep * 1000,
        "worker": adapter.describe_mode(adapter.crash_mode),
        "mode": adapter.crash_mode,
        "kill_after_first_start_s": sizes.crash_kill_after,
        "window_s": sizes.crash_window,
        "idle_s": sizes.crash_idle,
        "started_before_kill": started_before,
        "finished_before_kill": finished_before,
        "in_flight_at_kill": in_flight,
        "lost": len(lost),
        "duplicated": len(dups),
        "finished_twice": len(twice),
        "lost_sample": lost[:10],
        "duplicated_sample": dups[:10],
        "all_done_s_after_restart": recovered_in if complete else None,
    }


SCENARIOS: dict[str, Callable[[Adapter, Sizes], Result]] = {
    "enqueue": enqueue,
    "bulk": bulk,
    "drain": drain,
    "latency": latency,
    "io": io,
    "rss": rss,
    "crash": crash,
    "tune": tune,
}
DEFAULT_SCENARIOS = ("enqueue", "bulk", "drain", "latency", "io", "rss", "crash")
