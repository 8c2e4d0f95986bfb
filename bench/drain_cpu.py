"""Client CPU per job of an in-process drain: a steadier A/B signal than wall-clock rates.

Fills a private Redis with 20,000 no-op jobs, runs one threaded worker (``max_jobs``) until they
are done, and prints jobs/s, the process's CPU time per job and the redis-server's (INFO cpu).
Compare two source trees with PYTHONPATH, alternating, and keep the minimum of a few runs each:

    redis-server --port 16500 --save '' --appendonly no --daemonize yes
    PYTHONPATH=/tmp/old/src .venv/bin/python bench/drain_cpu.py old
    PYTHONPATH=src .venv/bin/python bench/drain_cpu.py new

``BENCH_COMMANDSTATS=1`` also prints the server's top commands during the drain (``INFO
commandstats``, reset after the jobs are queued; a script's inner commands are counted both
in ``evalsha`` and under their own names).
"""

from __future__ import annotations

import logging
import os
import sys
import time

import redis
from conveyor import Conveyor, JobSpec

JOBS = 20_000


def main(label: str, url: str, concurrency: int) -> None:
    """Drain ``JOBS`` jobs on ``url`` and print the rate and CPU per job."""
    logging.disable(logging.WARNING)
    app = Conveyor(url)
    app.broker.flush_all()

    @app.task
    def bench_job(n: int) -> None:
        return None

    app.enqueue_many([JobSpec("bench_job", (i,)) for i in range(JOBS)])
    worker = app.worker(
        ["default"], concurrency=concurrency, handle_signals=False, heartbeat=False, max_jobs=JOBS
    )
    client = redis.Redis.from_url(url)
    client.config_resetstat()
    r0 = _redis_cpu(client)
    t0, c0 = time.perf_counter(), time.process_time()
    worker.run()
    t1, c1 = time.perf_counter(), time.process_time()
    rate, cpu = JOBS / (t1 - t0), 1e6 * (c1 - c0) / JOBS
    redis_cpu = 1e6 * (_redis_cpu(client) - r0) / JOBS
    print(
        f"{label}: {worker.processed} jobs, wall {rate:,.0f}/s, cpu {cpu:.1f} us/job, "
        f"redis cpu {redis_cpu:.1f} us/job"
    )
    if os.environ.get("BENCH_COMMANDSTATS"):
        stats = client.info("commandstats")
        for name, row in sorted(stats.items(), key=lambda kv: -kv[1]["usec"])[:6]:
            print(
                f"  {name.removeprefix('cmdstat_')}: {row['calls']} calls, "
                f"{row['usec'] / JOBS:.2f} us/job, {row['usec_per_call']:.1f} us/call"
            )


def _redis_cpu(client: redis.Redis) -> float:
    """The redis-server's used_cpu_sys + used_cpu_user (seconds)."""
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


if __name__ == "__main__":
    args = sys.argv[1:] + ["run", "redis://127.0.0.1:16500/0", "32"][len(sys.argv) - 1 :]
    main(args[0], args[1], int(args[2]))
