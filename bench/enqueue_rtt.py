"""Single enqueue latency against one EVALSHA round trip (issue 18: "<= 1.1x one EVALSHA").

One producer thread, one private redis-server (or ``--url``), the app's own redis-py client
for both sides (same connection pool, same parser): alternating blocks of

* ``evalsha``: ``client.evalsha(<sha of "return 1">, 0)``, the floor of any one-call enqueue;
* ``enqueue``: ``task.enqueue(i)``, the whole producer path (validation, id, envelope, the
  enqueue_one.lua call, the handle);

``--calls`` each (after a warm-up), timed one by one with ``perf_counter``. Prints p50 / p90
of each and the ratio of the p50s (the issue's target is ≤ 1.1). Wall-clock latencies on a
busy machine wander: the blocks alternate so both sides see the same load; compare trees by
PYTHONPATH:

    PYTHONPATH=$PWD/src .venv/bin/python bench/enqueue_rtt.py
    PYTHONPATH=/tmp/c_base/src .venv/bin/python bench/enqueue_rtt.py --json
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis

BLOCK = 500


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server() -> tuple[subprocess.Popen[bytes], str, str]:
    port, workdir = _free_port(), tempfile.mkdtemp(prefix="enqueue-rtt-")
    argv = [shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", ""]
    argv += ["--appendonly", "no", "--dir", workdir, "--bind", "127.0.0.1"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return server, url, workdir
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _timed(call: Callable[[int], Any], start: int, n: int) -> list[float]:
    out = []
    clock = time.perf_counter
    for i in range(start, start + n):
        t0 = clock()
        call(i)
        out.append(clock() - t0)
    return out


def measure(url: str, calls: int) -> dict[str, float]:
    """p50 / p90 (µs) of both sides and the p50 ratio."""
    from conveyor import Conveyor

    logging.disable(logging.WARNING)
    app = Conveyor(url)
    app.broker.flush_all()

    @app.task(name="bench.rtt")
    def job(n: int) -> None:
        return None

    client = app.broker.client
    sha = client.script_load("return 1")
    sides: dict[str, Callable[[int], Any]] = {
        "evalsha": lambda i: client.evalsha(sha, 0),
        "enqueue": job.enqueue,
    }
    for call in sides.values():  # warm-up: connections, script cache, code paths
        _timed(call, 0, 200)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for start in range(0, calls, BLOCK):
        n = min(BLOCK, calls - start)
        for name, call in sides.items():
            times[name] += _timed(call, 1_000_000 + start, n)
    # where an enqueue's time goes: the script's own time (server) and the producer's CPU
    client.config_resetstat()
    c0 = time.process_time()
    _timed(job.enqueue, 2_000_000, BLOCK)
    client_cpu = (time.process_time() - c0) / BLOCK
    script = client.info("commandstats").get("cmdstat_evalsha", {}).get("usec_per_call", 0.0)
    app.close()
    row: dict[str, float] = {"calls": calls}
    row["enqueue_script_us"] = float(script)
    row["enqueue_client_cpu_us"] = 1e6 * client_cpu
    for name, samples in times.items():
        cuts = statistics.quantiles(samples, n=10)
        row[f"{name}_p50_us"] = 1e6 * statistics.median(samples)
        row[f"{name}_p90_us"] = 1e6 * cuts[8]
    row["ratio_p50"] = row["enqueue_p50_us"] / row["evalsha_p50_us"]
    return row


def main() -> None:
    """Start a server (unless ``--url``), measure, print."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default="", help="an existing Redis (flushed!); default: private")
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    server, workdir = None, ""
    url = a.url
    if not url:
        server, url, workdir = _start_server()
    try:
        row = measure(url, a.calls)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
            shutil.rmtree(workdir, ignore_errors=True)
    if a.json:
        print(json.dumps(row))
        return
    print(
        f"EVALSHA no-op p50 {row['evalsha_p50_us']:.1f} µs (p90 {row['evalsha_p90_us']:.1f}), "
        f"task.enqueue p50 {row['enqueue_p50_us']:.1f} µs (p90 {row['enqueue_p90_us']:.1f}): "
        f"{row['ratio_p50']:.2f}x (target <= 1.1x); in one more block of enqueues: "
        f"{row['enqueue_script_us']:.1f} µs inside enqueue_one.lua, "
        f"{row['enqueue_client_cpu_us']:.1f} µs of producer CPU per call"
    )


if __name__ == "__main__":
    main()
