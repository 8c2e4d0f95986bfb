"""Auto-batching producer A/B (issue 18): many threads enqueueing one job per call on Redis.

Starts a private redis-server (free loopback port, no persistence), then runs, alternating,
``rounds`` times each: ``off`` (every ``enqueue`` is its own EVALSHA) and ``on``
(``Conveyor(url, autobatch=AutoBatch(max_jobs, max_delay))``). Each run is a fresh process:
``threads`` threads each enqueue ``per_thread`` jobs with one ``enqueue`` call per job. Printed
per run and as the minimum per mode: jobs/s, the producer process's CPU per job
(``time.process_time``: all its threads), the server's CPU per job (INFO cpu before/after)
and the EVALSHA calls the server saw (INFO commandstats) — i.e. the mean batch size.

    PYTHONPATH=$PWD/src .venv/bin/python bench/autobatch_cpu.py               # smoke size
    PYTHONPATH=$PWD/src .venv/bin/python bench/autobatch_cpu.py --threads 50 --per-thread 2000
    # several max_delay values side by side (modes on@0.001, on@0, ...), e.g. one lone thread:
    PYTHONPATH=$PWD/src .venv/bin/python bench/autobatch_cpu.py --threads 1 --delays 0.001,0

Wall-clock rates mean little on a busy machine; the CPU per job figures are the A/B signal.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def run_one(
    url: str, mode: str, threads: int, per_thread: int, max_jobs: int, delay: float
) -> None:
    """One measured run in this process; prints one JSON line."""
    from conveyor import AutoBatch, Conveyor

    logging.disable(logging.WARNING)
    if mode.startswith("on@"):  # one of --delays
        delay = float(mode[3:])
    auto = AutoBatch(max_jobs, delay) if mode.startswith("on") else False
    app = Conveyor(url, autobatch=auto)
    app.broker.flush_all()
    app.enqueue("bench_job", args=[-1])  # connect, load the scripts
    client = redis.Redis.from_url(url)
    client.config_resetstat()
    start = threading.Barrier(threads + 1)

    def produce(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            app.enqueue("bench_job", args=[k, i])

    pool = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    r0, c0 = _server_cpu(client), time.process_time()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    c1, r1 = time.process_time(), _server_cpu(client)
    jobs = threads * per_thread
    calls = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    app.close()
    row = {
        "mode": mode,
        "jobs": jobs,
        "rate": jobs / wall,
        "client_cpu_us": 1e6 * (c1 - c0) / jobs,
        "redis_cpu_us": 1e6 * (r1 - r0) / jobs,
        "evalsha_calls": calls,
        "jobs_per_call": jobs / calls if calls else 0.0,
    }
    print(json.dumps(row))


def main() -> None:
    """Start the server, alternate the modes, print each run and the minimum per mode."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=50)
    p.add_argument("--per-thread", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-jobs", type=int, default=100)
    p.add_argument("--max-delay", type=float, default=0.001)
    p.add_argument(
        "--delays", default="", help="compare these max_delay values (comma-separated) with off"
    )
    p.add_argument("--one", nargs=2, metavar=("URL", "MODE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        run_one(a.one[0], a.one[1], a.threads, a.per_thread, a.max_jobs, a.max_delay)
        return
    port, workdir = _free_port(), tempfile.mkdtemp(prefix="autobatch-bench-")
    server = subprocess.Popen(
        [
            *(shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", ""),
            *("--appendonly", "no", "--dir", workdir, "--bind", "127.0.0.1"),
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_up(url)
        modes = ["off"] + ([f"on@{d}" for d in a.delays.split(",")] if a.delays else ["on"])
        rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        flags = ["--threads", str(a.threads), "--per-thread", str(a.per_thread)]
        flags += ["--max-jobs", str(a.max_jobs), "--max-delay", str(a.max_delay)]
        for _ in range(a.rounds):
            for mode in modes:
                out = subprocess.run(
                    [sys.executable, __file__, *flags, "--one", url, mode],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row = json.loads(out.stdout.strip().splitlines()[-1])
                rows[mode].append(row)
                print(_line(row), flush=True)
        for mode in modes:
            best = {k: min(r[k] for r in rows[mode]) for k in ("client_cpu_us", "redis_cpu_us")}
            rate = max(r["rate"] for r in rows[mode])
            print(
                f"min {mode}: client {best['client_cpu_us']:.1f} us/job, redis "
                f"{best['redis_cpu_us']:.1f} us/job, best rate {rate:,.0f}/s"
            )
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['mode']:>8}: {row['jobs']} jobs, {row['rate']:,.0f}/s, client "
        f"{row['client_cpu_us']:.1f} us/job, redis {row['redis_cpu_us']:.1f} us/job, "
        f"{row['evalsha_calls']} EVALSHA ({row['jobs_per_call']:.1f} jobs/call)"
    )


def _wait_up(url: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    main()
