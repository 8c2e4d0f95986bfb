"""Workflow numbers (issue 16): chord callback latency and per-node broker overhead on Redis;
``job.wait()`` latency on Redis and SQLite.

* chord: a chord of ``--members`` no-op jobs and a callback, run by one worker process
  (``concurrency`` threads) in this process. Latency = the callback handler's start - the last
  member handler's return (both ``time.time()`` in the handlers): it covers the member's
  completion (the worker's ack batch), the release in the same script, and the claim of the
  callback. Target: <= 50 ms for 10,000 members. The broker-side release delay (the callback's
  ``run_at`` - the last member's ``finished_at``) is printed too: 0 by construction.
* overhead: broker time per job (enqueue + claim + complete through the Broker protocol, no
  handler, one job per call) for plain jobs, a chain and a chord of ``--nodes`` nodes. Target:
  a workflow node <= 2x a plain job.
* wait: ``--waits`` jobs one after the other, each waited for with ``job.wait()`` while a worker
  thread runs them; latency = ``wait()``'s return (``time.time()``) - the job's ``finished_at``
  (the worker's clock when it acked). Target: p50 <= 5 ms, on Redis and on a SQLite file.

Starts a private redis-server (bench/harness/redis_server.py) unless ``--redis URL`` is given.
The machine must be quiet: record the numbers in docs/benchmarks.md from a quiet run.

    .venv/bin/python -m bench.workflows [--members 10000] [--nodes 2000] [--waits 500] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from conveyor import Conveyor, chain, chord
from conveyor.broker.base import Ack


def chord_latency(url: str, members: int, concurrency: int) -> dict[str, Any]:
    """Run one chord; the callback's start minus the last member's return."""
    app = Conveyor(url)
    app.broker.flush_all()
    ends: list[float] = []
    started: list[float] = []

    @app.task(name="bench.member")
    def member(n: int) -> int:
        ends.append(time.time())  # list.append is atomic under the GIL
        return n

    @app.task(name="bench.callback")
    def callback(results: list[int]) -> int:
        started.append(time.time())
        return len(results)

    t0 = time.perf_counter()
    flow = chord([member.s(n) for n in range(members)], callback.s()).enqueue()
    enqueued = time.perf_counter() - t0
    worker = app.worker(concurrency=concurrency, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 600
    while not started and time.monotonic() < deadline:
        time.sleep(0.005)
    worker.stop(timeout=10)
    thread.join(15)
    if not started:
        raise SystemExit("the callback never started")
    last = app.broker.get(flow.sinks[0])
    parts = [j for j in flow.jobs() if j.id != flow.sinks[0]]
    finished = max(j.finished_at or 0.0 for j in parts)
    out = {
        "members": members,
        "enqueue_s": round(enqueued, 3),
        "callback_latency_ms": round((started[0] - max(ends)) * 1000, 2),
        "release_delay_ms": round(((last.run_at if last else 0.0) - finished) * 1000, 3),
    }
    app.close()
    return out


def _drain(app: Conveyor, n: int) -> float:
    """Claim and complete one job per call until ``n`` are done; seconds spent."""
    broker, done = app.broker, 0
    t0 = time.perf_counter()
    while done < n:
        now = app.now()
        for lease in broker.claim(["default"], now, limit=1):
            broker.complete([Ack(lease.id, lease.token, 1, "default")], now)
            done += 1
    return time.perf_counter() - t0


def overhead(url: str, nodes: int) -> dict[str, Any]:
    """Broker µs per job: plain jobs, a chain and a chord (enqueue + claim + complete)."""
    app = Conveyor(url)

    @app.task(name="bench.node")
    def node(*args: Any) -> None:
        return None

    out: dict[str, Any] = {"nodes": nodes}
    shapes = {
        "plain": lambda: app.enqueue_many([node.spec(i) for i in range(nodes)]),
        "chain": lambda: chain(*[node.s(i) for i in range(nodes)]).enqueue(),
        "chord": lambda: chord([node.s(i) for i in range(nodes - 1)], node.s()).enqueue(),
    }
    for name, build in shapes.items():
        app.broker.flush_all()
        t0 = time.perf_counter()
        build()
        spent = time.perf_counter() - t0 + _drain(app, nodes)
        out[f"{name}_us_per_job"] = round(spent / nodes * 1e6, 1)
    plain = out["plain_us_per_job"]
    out["chain_ratio"] = round(out["chain_us_per_job"] / plain, 2)
    out["chord_ratio"] = round(out["chord_us_per_job"] / plain, 2)
    app.close()
    return out


def wait_latency(url: str, waits: int) -> dict[str, Any]:
    """``job.wait()``'s return minus the job's ``finished_at``, one job at a time (ms)."""
    app = Conveyor(url)
    app.broker.flush_all()

    @app.task(name="bench.echo")
    def echo(n: int) -> int:
        return n

    worker = app.worker(concurrency=1, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    lags: list[float] = []
    try:
        for i in range(waits + 5):  # the first few warm the connections up
            handle = echo.enqueue(i)
            handle.wait(timeout=30)
            returned = time.time()
            job = app.broker.get(handle.id)
            if i >= 5 and job is not None and job.finished_at is not None:
                lags.append((returned - job.finished_at) * 1000)
    finally:
        worker.stop(timeout=10)
        thread.join(15)
        app.close()
    lags.sort()
    return {
        "waits": len(lags),
        "p50_ms": round(statistics.median(lags), 2),
        "p90_ms": round(lags[int(len(lags) * 0.9)], 2),
        "max_ms": round(lags[-1], 2),
    }


def main() -> None:
    """Parse arguments, run both measurements, print (and save) the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default="", help="a Redis URL (default: a private server)")
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--waits", type=int, default=500)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    server = None
    url = args.redis
    if not url:
        from bench.harness.redis_server import start_redis

        server = start_redis()
        url = server.url
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite_url = f"sqlite:///{Path(tmp) / 'wait.db'}"
            result = {
                "chord": chord_latency(url, args.members, args.concurrency),
                "overhead": overhead(url, args.nodes),
                "wait_redis": wait_latency(url, args.waits),
                "wait_sqlite": wait_latency(sqlite_url, args.waits),
            }
    finally:
        if server is not None:
            server.stop()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
