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
    autobatch_threads: int = 50


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


def redis_cpu(adapter: Adapter) -> float | None:
    """The harness redis-server's CPU seconds so far, or ``None`` when the system is not on it."""
    return adapter.ctx.redis.cpu_seconds() if adapter.uses_redis else None


def redis_cpu_per_job(adapter: Adapter, before: float | None, jobs: int) -> Result:
    """``{"redis_cpu_us_per_job": ...}``: the server's CPU since ``before`` over ``jobs``.

    Everything the server did in between counts: the system's scripts and commands, its
    workers' polling and housekeeping, and the two INFO calls themselves (a few µs in all).
    """
    after = redis_cpu(adapter)
    if before is None or after is None or jobs <= 0:
        return {}
    return {"redis_cpu_us_per_job": (after - before) / jobs * 1e6}


def _warm_up(adapter: Adapter, log: JobLog, proc: Any, timeout: float = 60.0) -> None:
    """Enqueue 3 jobs and wait until they ran: the worker is up and connected."""
    adapter.enqueue_one(3, start=WARMUP)
    if not adapter.wait_drained(log, range(WARMUP, WARMUP + 3), timeout, stall=None, proc=proc):
        raise TimeoutError(f"worker did not run warm-up jobs within {timeout}s")


def enqueue(adapter: Adapter, sizes: Sizes) -> Result:
    """Enqueue rate: one call per job, one producer process, no worker running."""
    n, extra = _sized(adapter, "enqueue", sizes.enqueue)
    adapter.flush()
    cpu0 = redis_cpu(adapter)
    res = adapter.enqueue_one(n)
    cpu = redis_cpu_per_job(adapter, cpu0, n)
    adapter.flush()
    return asdict(res) | cpu | extra


#: The producer's settings of ``enqueue_autobatch``'s "on" half (docs/design.md).
AUTOBATCH_ENV = {"CONVEYOR_AUTOBATCH_MAX_JOBS": "100", "CONVEYOR_AUTOBATCH_MAX_DELAY": "0.001"}


def enqueue_autobatch(adapter: Adapter, sizes: Sizes) -> Result:
    """Conveyor only (issue 18): one call per job from ``autobatch_threads`` threads of one
    producer, without (``off``) and with (``on``) the auto-batching producer; each half reports
    its rate, Redis CPU and producer CPU per job. Not in the default set."""
    if adapter.name != "conveyor":
        return {"skipped": "Conveyor's auto-batching producer only"}
    n, extra = _sized(adapter, "enqueue", sizes.enqueue)
    out: Result = {"threads": sizes.autobatch_threads, "settings": AUTOBATCH_ENV} | extra
    for mode, env in (("off", {}), ("on", AUTOBATCH_ENV)):
        adapter.flush()
        cpu0 = redis_cpu(adapter)
        raw = adapter.enqueue_threads(n, sizes.autobatch_threads, env)
        cpu = redis_cpu_per_job(adapter, cpu0, n)
        client = 1e6 * float(str(raw.get("cpu_s", math.nan))) / n
        out[mode] = {"rate": raw["rate"], "client_cpu_us_per_job": client} | cpu
    adapter.flush()
    return out | {"rate": out["on"]["rate"]}


def bulk(adapter: Adapter, sizes: Sizes) -> Result:
    """Bulk enqueue rate with the system's bulk API (batches of ``bulk_batch``)."""
    n, extra = _sized(adapter, "bulk", sizes.bulk)
    adapter.flush()
    cpu0 = redis_cpu(adapter)
    res = adapter.enqueue_bulk(n, batch=sizes.bulk_batch)
    cpu = redis_cpu_per_job(adapter, cpu0, n)
    adapter.flush()
    if res is None:
        return {"skipped": "no bulk API"}
    return asdict(res) | {"batch": sizes.bulk_batch} | cpu | extra


def drain_mode(
    adapter: Adapter, mode: str, count: int, *, sleep_s: float = 0.0, timeout: float = 900.0
) -> Result:
    """Queue ``count`` jobs, start one worker in ``mode``, time first start -> last finish."""
    adapter.flush()
    adapter.prefill(count, sleep_s=sleep_s)
    log = _log(adapter, f"drain-{mode}")
    cpu0 = redis_cpu(adapter)
    t_spawn = time.time()
    proc = adapter.start_worker(mode, log.path)
    cpu: Result = {}
    try:
        complete = adapter.wait_drained(log, range(count), timeout, stall=30.0, proc=proc)
        cpu = redis_cpu_per_job(adapter, cpu0, count)  # worker start-up included
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
    } | cpu
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
        cpu0 = redis_cpu(adapter)
        prod = adapter.enqueue_paced(sizes.latency, sizes.latency_interval)
        complete = adapter.wait_drained(log, range(sizes.latency), 60.0, stall=20.0, proc=proc)
        cpu = redis_cpu_per_job(adapter, cpu0, sizes.latency)  # enqueue + pickup + idle waits
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
    } | cpu


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
    cpu0 = redis_cpu(adapter)
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
        cpu = redis_cpu_per_job(adapter, cpu0, count)
        log.poll()
        lost = log.lost(range(count))  # within the window, before any follow-up
        late = _late_recovery(adapter, log, range(count), proc2, t_restart)
    finally:
        adapter.stop_worker(proc2)
    log.poll()
    dups = log.duplicated(range(count))
    twice = [n for n in range(count) if log.finishes.get(n, 0) > 1]
    adapter.flush()
    return (
        {
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
        | cpu
        | late
    )


def _late_recovery(
    adapter: Adapter, log: JobLog, expected: range, proc: Any, t_restart: float
) -> Result:
    """Lost within the window: keep the second worker ``crash_followup`` s more (if set).

    Tells "delayed" from "lost": a system that redelivers only after a long lock (BullMQ's
    30 s lock plus its 30 s stalled-jobs check) gets its jobs back late; the "lost" figure
    stays the count within the window, as for every system.
    """
    missing = log.lost(expected)
    if not missing or adapter.crash_followup <= 0:
        return {}
    done = adapter.wait_drained(log, expected, adapter.crash_followup, stall=None, proc=proc)
    log.poll()
    still = log.lost(expected)
    return {
        "followup_s": adapter.crash_followup,
        "recovered_after_window": len(missing) - len(still),
        "lost_after_followup": len(still),
        "all_done_s_after_restart_late": (time.monotonic() - t_restart) if done else None,
    }


SCENARIOS: dict[str, Callable[[Adapter, Sizes], Result]] = {
    "enqueue": enqueue,
    "enqueue_autobatch": enqueue_autobatch,
    "bulk": bulk,
    "drain": drain,
    "latency": latency,
    "io": io,
    "rss": rss,
    "crash": crash,
    "tune": tune,
}
DEFAULT_SCENARIOS = ("enqueue", "bulk", "drain", "latency", "io", "rss", "crash")
