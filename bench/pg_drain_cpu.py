"""CPU, rows and WAL per drained job for one system on the harness's private PostgreSQL.

    PYTHONPATH=. .bench-venv/bin/python bench/pg_drain_cpu.py conveyor-postgres best 20000

Queues N no-op jobs, starts one worker in MODE, and from the first job start to the last
finish measures the worker process tree's CPU and all PostgreSQL server processes' CPU; row and
WAL counters come from ``pg_stat_database`` / ``pg_stat_wal`` (read 1.5 s after the worker
stops, when the server has flushed its statistics). Used for docs/benchmarks.md ("What bounds
Conveyor's PostgreSQL drain"). ``PG_DRAIN_ANALYZE=1``: ANALYZE the filled tables before the
drain (the steady state of a busy table, which autovacuum analyzes; a fresh table has no
statistics and the planner then estimates differently).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.harness.adapter import BenchContext
from bench.harness.joblog import JobLog
from bench.harness.peers import load_adapter
from bench.harness.redis_server import start_redis
from bench.harness.run import REPO


def tree_cpu(root: psutil.Process) -> float:
    """User + system CPU seconds of ``root`` and all its children (gone ones skipped)."""
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def _hot(a: object) -> list[float]:
    """Row updates and HOT updates of the system's tables (``pg_stat_user_tables``)."""
    sql = (
        "SELECT COALESCE(sum(n_tup_upd), 0), COALESCE(sum(n_tup_hot_upd), 0)"
        " FROM pg_stat_user_tables"
    )
    out = a.pg.psql(sql, db=a.database)  # type: ignore[attr-defined]
    return [float(x) for x in out.split("|")]


def main(name: str, mode: str, n: int) -> None:
    """Drain ``n`` jobs with ``name``'s worker in ``mode``; print the per-job figures."""
    redis = start_redis()
    a = load_adapter(name)(BenchContext(REPO, redis, Path(tempfile.mkdtemp(prefix="pgcpu-"))))
    try:
        a.flush()
        if os.environ.get("PG_DRAIN_SQL"):  # an experiment: e.g. drop an index before the run
            a.pg.psql(os.environ["PG_DRAIN_SQL"], db=a.database)  # type: ignore[attr-defined]
        a.prefill(n)
        if os.environ.get(
            "PG_DRAIN_ANALYZE"
        ):  # statistics as autovacuum keeps them on a busy table
            a.pg.psql("ANALYZE", db=a.database)  # type: ignore[attr-defined]
        stats = (
            "SELECT d.xact_commit, d.tup_updated, d.tup_inserted, d.tup_deleted,"
            " d.tup_returned + d.tup_fetched, w.wal_bytes FROM pg_stat_database d, pg_stat_wal w"
            f" WHERE d.datname = '{a.database}'"  # type: ignore[attr-defined]
        )
        time.sleep(1.5)
        before = [float(x) for x in a.pg.psql(stats).split("|")]  # type: ignore[attr-defined]
        before += _hot(a)
        log = JobLog(a.ctx.workdir / "jobs.log")
        log.path.touch()
        worker = a.start_worker(mode, log.path)
        postmaster = int((a.pg.data / "postmaster.pid").read_text().split()[0])  # type: ignore[attr-defined]
        server, proc = psutil.Process(postmaster), psutil.Process(worker.pid)
        while log.first_start is None:
            log.poll()
            time.sleep(0.002)
        s0, w0 = tree_cpu(server), tree_cpu(proc)
        a.wait_drained(log, range(n), 600, proc=worker)
        s1, w1 = tree_cpu(server), tree_cpu(proc)
        a.stop_worker(worker)
        time.sleep(1.5)
        after = [float(x) for x in a.pg.psql(stats).split("|")]  # type: ignore[attr-defined]
        after += _hot(a)
        d = [(y - x) / n for x, y in zip(before, after, strict=True)]
        span = log.span(range(n))
        print(
            f"{name} {mode} n={n}: {n / span:,.0f} jobs/s; per job: worker CPU "
            f"{(w1 - w0) / n * 1e6:.0f} us, server CPU {(s1 - s0) / n * 1e6:.0f} us, commits "
            f"{d[0]:.3f}, rows updated {d[1]:.2f} inserted {d[2]:.2f} deleted {d[3]:.2f} "
            f"read {d[4]:.1f}, WAL {d[5]:,.0f} bytes, HOT updates {d[7] / max(d[6], 1e-9):.0%}"
        )
    finally:
        redis.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
