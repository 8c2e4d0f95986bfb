"""Flow-control benchmarks (issue 15, docs/flow-control.md, the Numbers in docs/benchmarks.md).

Each scenario fills one queue with no-op jobs and drains it through the broker's own claim and
complete calls (``claim(limit=32)`` then one ``complete`` per batch, one process): the cost
measured is the claim path's, which is where the limits are enforced. Scenarios:

* ``nolimit``   — plain jobs: the drain rate to compare with a run of the previous version.
* ``conc``      — ``ConcurrencyLimit(1, key=...)`` over ``--keys`` keys (1,000 by default):
  the issue asks for at least 50 % of the ``nolimit`` rate.
* ``fair``      — ``fair_by=...`` over ``--keys`` groups (10,000): at least 80 %.
* ``keys``      — Redis only: the server time of the drain's scripts per job (``INFO
  commandstats`` of EVALSHA: claim + complete) with 100, 1,000, 10,000 and 100,000 fair keys
  (two jobs each): it must stay flat.

Each drain also reports its CPU per job (this process's CPU time plus the server's: Redis from
``INFO cpu``; PostgreSQL, with ``--pg`` or ``--server-pid``, the postmaster and its backends from
/proc), split as ``*_worker_us`` / ``*_server_us``, and ``*_cpu_ratio`` = no-limit CPU per
job ÷ the scenario's (the drain-rate ratio a CPU-bound drain would show): on a shared machine,
compare those, not the rates.

Every timed drain follows an untimed one of ``--warmup`` jobs (1,000) of the same scenario in
the same process and connections, so one-off costs (Lua scripts loaded, statements prepared
and planned, a new backend's catalog caches) are in neither figure; ``--repeat N`` runs the
scenarios N rounds, interleaved, and keeps the best of each (a shared machine's noise).

Usage (the lead records the full-size numbers; smoke-run small)::

    python -m bench.flow_control --url redis://127.0.0.1:6379/0 --jobs 20000
    python -m bench.flow_control --url memory:// --jobs 2000 --keys 100 \
        --scenarios nolimit,conc,fair
    PYTHONPATH=$PWD/src:$PWD python -m bench.flow_control --pg --jobs 20000  # private cluster
    PYTHONPATH=$PWD/src:$PWD python -m bench.flow_control --pg --jobs 20000 --repeat 3
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time
from typing import Any

from conveyor import ConcurrencyLimit, Conveyor
from conveyor.broker.base import Ack

BATCH = 32


def _app(url: str) -> Conveyor:
    app = Conveyor(url)
    if hasattr(app.broker, "flush_all"):
        app.broker.flush_all()
    return app


def _fill(app: Conveyor, task: str, jobs: int, keys: int) -> None:
    specs = [app.tasks[task].spec(f"k{i % max(keys, 1)}", i) for i in range(jobs)]
    for start in range(0, len(specs), 1000):
        app.enqueue_many(specs[start : start + 1000])


def _drain(app: Conveyor, jobs: int) -> float:
    """Seconds to claim and complete every job of the queue."""
    broker, done = app.broker, 0
    started = time.perf_counter()
    while done < jobs:
        leases = broker.claim(["bench"], app.now(), limit=BATCH, visibility_timeout=300)
        if not leases:
            if time.perf_counter() - started > 600:
                raise RuntimeError(f"stalled after {done} of {jobs} jobs")
            continue
        broker.complete([Ack(lease.id, lease.token) for lease in leases], app.now())
        done += len(leases)
    return time.perf_counter() - started


def _register(app: Conveyor) -> None:
    @app.task(name="bench.plain", queue="bench")
    def plain(key: str, i: int) -> None: ...

    @app.task(name="bench.conc", queue="bench", concurrency=ConcurrencyLimit(1, key="key"))
    def conc(key: str, i: int) -> None: ...

    @app.task(name="bench.fair", queue="bench", fair_by="key")
    def fair(key: str, i: int) -> None: ...


#: PostgreSQL's postmaster (``--pg`` / ``--server-pid``): its process tree is the server.
SERVER_PID: int | None = None


def _tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and its direct children (Linux /proc)."""
    total = 0
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.split("/")[2]) == pid or int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def _server_cpu(app: Conveyor) -> float:
    """The server's CPU seconds so far: Redis from INFO cpu, PostgreSQL from /proc (its
    postmaster's tree, when known); 0 for the in-process backends."""
    if SERVER_PID is not None:
        return _tree_cpu(SERVER_PID)
    client: Any = getattr(app.broker, "client", None)
    if client is None or not hasattr(client, "info"):
        return 0.0
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def drain_rate(
    url: str, task: str, jobs: int, keys: int, warmup: int = 0
) -> tuple[float, float, float]:
    """Jobs per second of one drain, and its CPU µs per job of this process and of the server
    (Redis, or PostgreSQL's processes when known): on a shared machine only the CPU figures
    compare runs. ``warmup``: jobs of the same scenario drained first, untimed, by the same
    process and connections (every scenario alike): what a process, a connection or a server
    pays once (Lua scripts loaded, statements prepared and planned, a backend's catalog
    caches, the allocator's first pages) stays out of the figures."""
    app = _app(url)
    _register(app)
    if warmup:
        _fill(app, task, warmup, min(keys, warmup))
        _drain(app, warmup)
    _fill(app, task, jobs, keys)
    cpu, server = time.process_time(), _server_cpu(app)
    seconds = _drain(app, jobs)
    worker, server = time.process_time() - cpu, _server_cpu(app) - server
    app.close()
    return jobs / seconds, worker / jobs * 1e6, server / jobs * 1e6


def claim_server_time(url: str, keys: int, per_key: int = 2) -> float:
    """Redis: server microseconds of the drain's scripts (claim + complete) per job, with
    ``keys`` fair groups waiting."""
    app = _app(url)
    _register(app)
    _fill(app, "bench.fair", keys * per_key, keys)
    client: Any = app.broker.client  # type: ignore[attr-defined]
    client.config_resetstat()
    _drain(app, keys * per_key)
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    app.close()
    return float(stats.get("usec", 0)) / max(keys * per_key, 1)


def main() -> None:
    """Run the chosen scenarios and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=0, help="default: 1,000 conc / 10,000 fair")
    parser.add_argument("--scenarios", default="nolimit,conc,fair,keys")
    parser.add_argument("--key-counts", default="100,1000,10000,100000")
    parser.add_argument(
        "--warmup", type=int, default=1000, help="untimed jobs drained first (every scenario)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the best of each kept")
    parser.add_argument("--pg", action="store_true", help="start a private PostgreSQL cluster")
    parser.add_argument("--server-pid", type=int, help="PostgreSQL's postmaster pid (its CPU)")
    args = parser.parse_args()
    wanted = set(args.scenarios.split(","))
    global SERVER_PID
    pg = None
    if args.pg:  # a private PostgreSQL cluster (tests/support/pg_proc.py: run from the repo root)
        from tests.support.pg_proc import PgServer

        pg = PgServer().start()
        args.url, SERVER_PID = pg.url, pg.pid()
    elif args.server_pid:
        SERVER_PID = args.server_pid
    out: dict[str, Any] = {"url": args.url.split("@")[-1], "jobs": args.jobs}
    try:
        _ratios(args, wanted, out)
    finally:
        if pg is not None:
            pg.stop()
    print(json.dumps(out, indent=2))


def _ratios(args: argparse.Namespace, wanted: set[str], out: dict[str, Any]) -> None:
    """The drain scenarios of ``wanted`` into ``out`` (rates, CPU per job, ratios): ``--repeat``
    rounds, each scenario once per round in the same order, the best of each kept (the
    highest rate, the lowest CPU per job)."""
    if wanted & {"nolimit", "conc", "fair"}:
        runs = [("nolimit", "bench.plain", 1)] + [
            (name, task, args.keys or keys)
            for name, task, keys in (("conc", "bench.conc", 1000), ("fair", "bench.fair", 10_000))
            if name in wanted
        ]
        best: dict[str, tuple[float, float, float]] = {}
        for _ in range(max(args.repeat, 1)):
            for name, task, keys in runs:
                rate, worker, server = drain_rate(args.url, task, args.jobs, keys, args.warmup)
                old = best.get(name, (0.0, float("inf"), float("inf")))
                if worker + server < old[1] + old[2]:
                    old = (old[0], worker, server)
                best[name] = (max(rate, old[0]), old[1], old[2])
        base, base_worker, base_server = best["nolimit"]
        base_cpu = base_worker + base_server
        out["nolimit_jobs_per_s"] = round(base, 1)
        out["nolimit_cpu_us_per_job"] = round(base_cpu, 2)
        out["nolimit_worker_us"], out["nolimit_server_us"] = (
            round(base_worker, 2),
            round(base_server, 2),
        )
        for name, _, _ in runs[1:]:
            rate, worker, server = best[name]
            out[f"{name}_jobs_per_s"], out[f"{name}_ratio"] = round(rate, 1), round(rate / base, 3)
            out[f"{name}_cpu_us_per_job"] = round(worker + server, 2)
            out[f"{name}_worker_us"], out[f"{name}_server_us"] = round(worker, 2), round(server, 2)
            out[f"{name}_cpu_ratio"] = round(base_cpu / (worker + server), 3)
    if "keys" in wanted and args.url.startswith("redis"):
        counts = [int(k) for k in args.key_counts.split(",")]
        out["script_usec_per_job_by_keys"] = {
            k: round(claim_server_time(args.url, k), 2) for k in counts
        }


if __name__ == "__main__":
    main()
