"""Producer process: enqueues jobs through one system's client and reports timings as JSON.

Runs on the *system's* interpreter (``Adapter.python``), never the harness's, so each system's
client library is imported only where it is installed. Standard library only.

    python -m bench.harness.producer --client bench.peer_tasks.rq_tasks \\
        --url redis://127.0.0.1:PORT/2 --op one --count 1000 [--start 0] [--sleep 0.0]

Ops: ``one`` (one enqueue call per job; ``--threads N`` spreads the calls over N threads of
the process, or N tasks for an async client), ``bulk`` (``enqueue_many`` in batches of ``--batch``),
``paced`` (one job every ``--interval`` seconds, each carrying its enqueue time), ``version``
(print the installed version of ``--package``). The last stdout line is a JSON object:
``{"op", "count", "elapsed", "rate", "cpu_s"}`` (``cpu_s``: this process's CPU time, all
threads). Job ``n`` is enqueued as ``(n, sleep_s, t_enq)`` where
``t_enq`` is ``time.time()`` taken just before the enqueue call.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import json
import os
import sys
import threading
import time
from typing import Any


def _items(start: int, count: int, sleep_s: float) -> list[tuple[int, float, float]]:
    now = time.time()
    return [(n, sleep_s, now) for n in range(start, start + count)]


def _batches(args: argparse.Namespace) -> list[list[tuple[int, float, float]]]:
    start, count = args.start, args.count
    return [
        _items(b, min(args.batch, start + count - b), args.sleep)
        for b in range(start, start + count, args.batch)
    ]


def produce_sync(client: Any, args: argparse.Namespace) -> float:
    """Run the requested op with a blocking client; return the elapsed time of the timed part."""
    start, count, sleep_s = args.start, args.count, args.sleep
    if hasattr(client, "connect"):
        client.connect()
    if args.op == "one" and args.threads > 1:
        elapsed = _threaded(client, args)
    elif args.op == "one":
        t0 = time.perf_counter()
        for n in range(start, start + count):
            client.enqueue(n, sleep_s, time.time())
        elapsed = time.perf_counter() - t0
    elif args.op == "bulk":
        batches = _batches(args)
        t0 = time.perf_counter()
        for batch in batches:
            client.enqueue_many(batch)
        elapsed = time.perf_counter() - t0
    else:  # paced
        t0 = time.perf_counter()
        for i, n in enumerate(range(start, start + count)):
            delay = t0 + i * args.interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            client.enqueue(n, 0.0, time.time())
        elapsed = time.perf_counter() - t0
    if hasattr(client, "close"):
        client.close()
    return elapsed


def _threaded(client: Any, args: argparse.Namespace) -> float:
    """Op ``one`` from ``--threads`` threads (job n on thread n % threads), started together."""
    parts = [
        range(args.start + k, args.start + args.count, args.threads) for k in range(args.threads)
    ]
    ready = threading.Barrier(args.threads + 1)

    def run(part: range) -> None:
        ready.wait()
        for n in part:
            client.enqueue(n, args.sleep, time.time())

    pool = [threading.Thread(target=run, args=(part,)) for part in parts]
    for t in pool:
        t.start()
    ready.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


async def produce_async(client: Any, args: argparse.Namespace) -> float:
    """Same as :func:`produce_sync` for a client whose methods are coroutines."""
    start, count, sleep_s = args.start, args.count, args.sleep
    if hasattr(client, "connect"):
        await client.connect()
    if args.op == "one" and args.threads > 1:
        elapsed = await _tasks(client, args)
    elif args.op == "one":
        t0 = time.perf_counter()
        for n in range(start, start + count):
            await client.enqueue(n, sleep_s, time.time())
        elapsed = time.perf_counter() - t0
    elif args.op == "bulk":
        batches = _batches(args)
        t0 = time.perf_counter()
        for batch in batches:
            await client.enqueue_many(batch)
        elapsed = time.perf_counter() - t0
    else:  # paced
        t0 = time.perf_counter()
        for i, n in enumerate(range(start, start + count)):
            delay = t0 + i * args.interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await client.enqueue(n, 0.0, time.time())
        elapsed = time.perf_counter() - t0
    if hasattr(client, "close"):
        await client.close()
    return elapsed


async def _tasks(client: Any, args: argparse.Namespace) -> float:
    """Op ``one`` from ``--threads`` tasks of one event loop (job n on task n % threads)."""

    async def run(part: range) -> None:
        for n in part:
            await client.enqueue(n, args.sleep, time.time())

    k, start, stop = args.threads, args.start, args.start + args.count
    t0 = time.perf_counter()
    await asyncio.gather(*(run(range(start + i, stop, k)) for i in range(k)))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run one op, print the JSON summary line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--client", help="module exposing make_client(redis_url)")
    p.add_argument("--url", default="", help="Redis URL for this system")
    p.add_argument("--op", required=True, choices=["one", "bulk", "paced", "version"])
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0, help="job body sleep, seconds")
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1, help="op one: parallel callers")
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--package", default="")
    args = p.parse_args(argv)
    if args.op == "version":
        print(json.dumps({"op": "version", "version": importlib.metadata.version(args.package)}))
        return 0
    os.environ["BENCH_REDIS_URL"] = args.url  # task modules read it at import time
    module = importlib.import_module(args.client)
    client = module.make_client(args.url)
    if args.op == "bulk" and not hasattr(client, "enqueue_many"):
        raise SystemExit(f"{args.client}: no bulk API (the client has no enqueue_many)")
    cpu0 = time.process_time()
    if getattr(client, "is_async", False):
        elapsed = asyncio.run(produce_async(client, args))
    else:
        elapsed = produce_sync(client, args)
    cpu = time.process_time() - cpu0
    rate = args.count / elapsed if elapsed > 0 else 0.0
    sys.stdout.flush()
    summary = {"op": args.op, "count": args.count, "elapsed": elapsed, "rate": rate, "cpu_s": cpu}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
