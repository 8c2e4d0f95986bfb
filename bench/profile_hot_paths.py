"""Profile Conveyor's hot paths on a private redis-server (not part of the harness).

    .venv/bin/python -m bench.profile_hot_paths [--n 5000] [--batch 200] [--profile drain]

Phases, each measured in wall time, this process's CPU time and the Redis server's CPU time
(``INFO cpu``), with the server's per-command cost (``INFO commandstats``):

* ``enqueue``: ``app.enqueue`` one call per job;
* ``bulk``: ``app.enqueue_many`` in batches of 1000;
* ``drain``: what a worker does, minus the executor: ``broker.claim(limit=batch)``, a no-op
  per job, ``broker.complete`` of the batch's acks (plus the MetricsMiddleware hooks).

``--profile PHASE`` runs that phase under cProfile and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.redis_proc import RedisServer

from conveyor import Conveyor
from conveyor.broker.base import Ack
from conveyor.monitoring.metrics import flush_local
from conveyor.task import JobSpec


def _server_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _commandstats(client: Any) -> dict[str, tuple[int, int]]:
    out = {}
    for name, stats in client.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = (int(stats["calls"]), int(stats["usec"]))
    return out


class Meter:
    """Wall, client CPU, server CPU and per-command server time of one phase."""

    def __init__(self, client: Any, name: str, n: int) -> None:
        self.client, self.name, self.n = client, name, n

    def __enter__(self) -> Meter:
        if self.client is not None:
            self.client.config_resetstat()
            self.s0 = _server_cpu(self.client)
        self.c0, self.w0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.w0
        cpu = time.process_time() - self.c0
        n = self.n
        print(
            f"{self.name:8s} n={n:6d}  {n / wall:9.0f} jobs/s wall   "
            f"client {cpu / n * 1e6:6.1f} us/job   (wall {wall / n * 1e6:6.1f} us/job)",
            end="",
        )
        if self.client is None:
            print()
            return
        server = _server_cpu(self.client) - self.s0
        stats = _commandstats(self.client)
        print(f"   server {server / n * 1e6:6.1f} us/job")
        top = sorted(stats.items(), key=lambda kv: -kv[1][1])[:8]
        print(
            "          server usec/job by command: "
            + ", ".join(
                f"{name} {usec / n:.1f} ({calls / n:.2f}/job)"
                for name, (calls, usec) in top
                if name not in ("config|resetstat", "info")
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=200, help="claim limit in the drain phase")
    ap.add_argument("--profile", choices=("enqueue", "bulk", "drain"), default=None)
    ap.add_argument(
        "--url",
        default=None,
        help="a Redis URL instead of a private server, or sqlite (a temp file), or memory://",
    )
    ap.add_argument("--phases", default="enqueue,bulk,drain")
    ap.add_argument(
        "--gc",
        choices=("on", "off", "freeze"),
        default="on",
        help="freeze: gc.freeze() after start-up (what a worker could do)",
    )
    ap.add_argument(
        "--inflight",
        type=int,
        default=0,
        help="drain: keep this many claimed jobs alive (a worker's in-flight set)",
    )
    opts = ap.parse_args()
    if opts.gc == "off":
        gc.disable()
    elif opts.gc == "freeze":
        gc.freeze()
    phases = opts.phases.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        url = opts.url
        if url is None:
            server = RedisServer(Path(tmp)).start()
            url = server.url
        elif url == "sqlite":
            url = f"sqlite:///{tmp}/profile.db"
        try:
            run(url, opts.n, opts.batch, opts.profile, phases, opts.inflight)
        finally:
            if server is not None:
                server.stop()


def run(
    url: str, n: int, batch: int, profile: str | None, phases: list[str], inflight: int = 0
) -> None:
    app = Conveyor(url)

    @app.task(name="noop")
    def noop(i: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
        return None

    broker: Any = app.broker
    client = broker.client if url.startswith("redis") else None
    app.broker.flush_all()
    app.enqueue("noop", args=[0, 0.0, time.time()])  # warm up: scripts loaded, clock synced
    app.broker.flush_all()
    prof = cProfile.Profile()

    def maybe(name: str) -> Any:
        if profile == name:
            prof.enable()
        return name

    if "enqueue" in phases:
        with Meter(client, "enqueue", n):
            maybe("enqueue")
            for i in range(n):
                app.enqueue("noop", args=[i, 0.0, time.time()])
            prof.disable()
        app.broker.flush_all()
    if "bulk" in phases or "drain" in phases:
        total = n * 4
        with Meter(client, "bulk", total):
            maybe("bulk")
            for start in range(0, total, 1000):
                app.enqueue_many(
                    [
                        JobSpec("noop", (i, 0.0, time.time()))
                        for i in range(start, min(total, start + 1000))
                    ]
                )
            prof.disable()
    if "drain" in phases:
        with Meter(client, "drain", total):
            maybe("drain")
            done = _drain(app, batch, inflight)
            prof.disable()
        assert done == total, (done, total)
    if profile:
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(25)
    flush_local(app)  # write buffered metrics now, not from the timer after the files are gone
    app.broker.flush_all()
    app.close()


class _FakeWorker:
    def __init__(self, app: Conveyor) -> None:
        self.app = app
        self.runtime = app.runtime  # the metrics middleware reads worker.runtime.now()


def _drain(app: Conveyor, batch: int, inflight: int) -> int:
    """Claim, run and complete every job of ``default`` as a worker would; returns the count."""
    broker: Any = app.broker
    worker: Any = _FakeWorker(app)
    done = 0
    keep: list[Any] = []
    mw = app.middleware
    while True:
        leases = broker.claim(
            ["default"], app.now(), limit=batch, worker_id="w1", visibility_timeout=60.0
        )
        if not leases:
            return done
        acks = []
        for lease in leases:
            job = lease.job
            for m in mw:
                m.before_process(worker, job)
            t0 = time.perf_counter()
            app.tasks[job.task].fn(*job.args, **job.kwargs)
            dur = time.perf_counter() - t0
            acks.append(Ack(job.id, lease.token, None, job.queue))
            for m in reversed(mw):
                m.after_process(worker, job, outcome="completed", duration=dur, error=None)
        ok = broker.complete(acks, app.now())
        done += sum(ok)
        if inflight:  # objects that stay alive a while, as in a worker
            keep.extend(leases)
            del keep[: max(0, len(keep) - inflight)]


if __name__ == "__main__":
    main()
