"""Sharded queues on a 3-master Redis Cluster, and the scaling curve (issue 18 items 3 and 4).

Starts its own servers (one plain redis-server and a 3-master cluster, loopback, free ports,
``tests/support/redis_proc.py``), runs separate worker and producer PROCESSES against one
logical queue, and reports jobs/s and each Redis node's CPU per job (``INFO cpu``
used_cpu_sys + used_cpu_user, read from every node before and after the measured part):

* ``drain``: the queue is filled first (bulk, one batch per shard in turn), then ``--workers``
  processes drain it; on the cluster with ``shards=1`` (one hot queue: one master does all
  the work) and with ``shards=N`` (spread over every master).
* ``curve``: 1, 2 and 4 worker processes plus as many producers (one job per enqueue call,
  the common case) run at the same time, against one Redis and against the cluster with
  ``shards=N``; the knee is the first step where adding processes adds < 25 % jobs/s.

Every process starts, builds its app, then waits for "go" on stdin, so start-up is not timed.
What carries over to a bigger machine is the Redis CPU per job per node: one node saturates
at about 1e6 / (its µs per job) jobs/s, and a cluster at its hottest master's figure
(``projection`` in the output, and docs/scaling.md).

    python bench/cluster_scale.py --smoke                 # proves it works (seconds)
    python bench/cluster_scale.py --jobs 40000 --out bench/results/cluster_scale.json
    # the shallow case only (workers outpace one-job-per-call producers), A/B of two trees:
    PYTHONPATH=/tmp/c_base/src python bench/cluster_scale.py --only curve --procs 1 --jobs 4000
    # the same on a single Redis with a sharded queue:
    python bench/cluster_scale.py --only curve --procs 1 --jobs 4000 --targets redis \
        --redis-shards 4

Each row also counts the workers' claim rounds and claim script calls per job (a round reads
the queues in turn, so on a sharded queue it may make one call per shard).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.redis_proc
sys.path.append(str(ROOT / "src"))  # after PYTHONPATH: an A/B run chooses the tree

QUEUE = "hot"
KNEE = 1.25  # a step that adds less than 25 % jobs/s is past the knee


def make_app(url: str, shards: int) -> Any:
    """The app every process builds: one no-op task on the (sharded) queue ``hot``."""
    from conveyor import Conveyor

    app = Conveyor(url)
    if shards > 1:
        app.queue(QUEUE, shards=shards)

    @app.task(name="bench.noop", queue=QUEUE)
    def noop(i: int) -> None:
        return None

    return app


def child(role: str, url: str, shards: int, count: int, concurrency: int) -> None:
    """A worker (runs ``count`` jobs) or producer (enqueues ``count`` jobs one per call)."""
    import logging

    logging.disable(logging.WARNING)
    app = make_app(url, shards)
    worker = None
    calls = {"claim": 0, "rounds": 0}
    if role == "worker":
        worker = app.worker([QUEUE], concurrency=concurrency, heartbeat=False, max_jobs=count)
        _count_claims(app.broker, calls)
    print("ready", flush=True)
    sys.stdin.readline()
    c0 = time.process_time()
    if worker is not None:
        worker.run()
    else:
        for i in range(count):
            app.enqueue("bench.noop", (i,))
    print(f"cpu {time.process_time() - c0} {calls['claim']} {calls['rounds']}", flush=True)
    app.close()


def _count_claims(broker: Any, calls: dict[str, int]) -> None:
    """Count the worker's claim rounds (``Broker.claim``) and claim script calls (one per
    queue read: a round over a sharded queue may read every shard)."""
    runner, claim = broker.runner, broker.claim
    real_run = runner.run

    def run(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "claim":
            calls["claim"] += 1
        return real_run(name, *args, **kwargs)

    def counted_claim(*args: Any, **kwargs: Any) -> Any:
        calls["rounds"] += 1
        return claim(*args, **kwargs)

    runner.run, broker.claim = run, counted_claim


def node_cpu(ports: list[int]) -> list[float]:
    """used_cpu_sys + used_cpu_user of each node (seconds)."""
    import redis

    out = []
    for port in ports:
        client = redis.Redis(port=port)
        info = client.info("cpu")
        client.close()
        out.append(float(info["used_cpu_sys"]) + float(info["used_cpu_user"]))
    return out


def split(total: int, parts: int) -> list[int]:
    """``total`` spread over ``parts`` as evenly as integers allow."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run_processes(
    url: str, shards: int, ports: list[int], jobs: int, workers: int, producers: int, conc: int
) -> dict[str, Any]:
    """Start the processes, time them from "go" until every worker finished its share."""
    roles = [("worker", n) for n in split(jobs, workers)]
    roles += [("producer", n) for n in split(jobs, producers)] if producers else []
    # children's stderr (start-up warnings) goes to a file, shown when something fails
    with tempfile.TemporaryFile("w+") as log:
        try:
            elapsed, cpu, claims, before, after = _timed(url, shards, ports, roles, conc, log)
        except Exception:
            log.seek(0)
            print(log.read()[-4000:], file=sys.stderr)
            raise
    per_node = [1e6 * (a - b) / jobs for a, b in zip(after, before, strict=True)]
    return {
        "jobs": jobs,
        "workers": workers,
        "producers": producers,
        "shards": shards,
        "jobs_per_s": jobs / elapsed,
        "node_us_per_job": per_node,
        "redis_us_per_job": sum(per_node),
        "worker_us_per_job": 1e6 * sum(cpu[:workers]) / jobs,
        "producer_us_per_job": 1e6 * sum(cpu[workers:]) / jobs if producers else None,
        # claim script calls and claim rounds (Broker.claim) per job, over all workers
        "claim_calls_per_job": sum(c for c, _ in claims[:workers]) / jobs,
        "claim_rounds_per_job": sum(r for _, r in claims[:workers]) / jobs,
        # the hottest node saturates first: its one core bounds the whole deployment
        "projected_jobs_per_s": 1e6 / max(per_node) if max(per_node) > 0 else None,
    }


def _timed(
    url: str, shards: int, ports: list[int], roles: list[tuple[str, int]], conc: int, log: Any
) -> tuple[float, list[float], list[tuple[int, int]], list[float], list[float]]:
    """(seconds from "go" to the last exit, each child's CPU, each child's (claim script
    calls, claim rounds), node CPU before, after)."""
    src = os.environ.get("PYTHONPATH") or str(ROOT / "src")  # an A/B run picks the tree
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(ROOT)])}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "_child", role, url, str(shards), str(n), str(conc)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
        for role, n in roles
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        before, t0 = node_cpu(ports), time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        cpu, claims = [], []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().split()
            cpu.append(float(line[1]))
            claims.append((int(line[2]), int(line[3])))
            p.wait(600)
        elapsed = time.perf_counter() - t0
        return elapsed, cpu, claims, before, node_cpu(ports)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def fill(url: str, shards: int, jobs: int) -> None:
    """Bulk-enqueue ``jobs`` (each call lands in the next shard: at least 4 calls a shard)."""
    from conveyor import JobSpec

    app = make_app(url, shards)
    app.broker.flush_all()
    batch = max(1, min(500, jobs // (4 * shards)))
    for start in range(0, jobs, batch):
        n = min(batch, jobs - start)
        app.enqueue_many([JobSpec("bench.noop", (start + i,)) for i in range(n)])
    app.close()


def flush(url: str) -> None:
    """Empty every node."""
    app = make_app(url, 1)
    app.broker.flush_all()
    app.close()


def knee(rows: list[dict[str, Any]]) -> int | None:
    """The process count past which one more step adds < 25 % jobs/s (None: still growing)."""
    for prev, row in itertools.pairwise(rows):
        if row["jobs_per_s"] < KNEE * prev["jobs_per_s"]:
            return int(prev["workers"])
    return None


def show(title: str, row: dict[str, Any]) -> None:
    """One result line."""
    nodes = " ".join(f"{us:5.1f}" for us in row["node_us_per_job"])
    proj = row["projected_jobs_per_s"]
    ceiling = f"  hottest node saturates at ≈ {proj:,.0f} jobs/s" if proj else ""
    print(
        f"{title:<36} {row['jobs_per_s']:>8,.0f} jobs/s  redis µs/job per node [{nodes}]"
        f"  worker {row['worker_us_per_job']:.0f} µs/job"
        f"  claim calls/job {row['claim_calls_per_job']:.2f}"
        f" (rounds {row['claim_rounds_per_job']:.2f})"
        f"{ceiling}"
    )


def main() -> None:
    """Parse arguments, start the servers, run the scenarios, print and save the results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--shards", type=int, default=3, help="shards of the queue on the cluster")
    ap.add_argument("--redis-shards", type=int, default=1, help="shards on the single Redis")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of the drain")
    ap.add_argument("--procs", default="1,2,4", help="process counts of the curve")
    ap.add_argument("--concurrency", type=int, default=32, help="threads per worker process")
    ap.add_argument("--only", choices=["drain", "curve"], default=None)
    ap.add_argument(
        "--targets", default="redis,cluster", help="where the curve runs (the shallow case)"
    )
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: proves the script works")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = ap.parse_args()
    if args.smoke:
        args.jobs = 600
    if args.jobs < max(int(n) for n in [args.workers, *args.procs.split(",")]):
        ap.error("--jobs must be at least the largest process count")
    import logging

    logging.disable(logging.WARNING)  # the private servers have no persistence: no warning
    from tests.support.redis_proc import RedisCluster, RedisServer

    results: dict[str, Any] = {"drain": [], "curve": {"redis": [], "cluster": []}}
    with tempfile.TemporaryDirectory(prefix="cluster-scale-") as tmp:
        single = RedisServer(Path(tmp) / "single").start()
        cluster = RedisCluster(Path(tmp) / "cluster").start()
        try:
            ports = [n.port for n in cluster.nodes]
            results["nodes"] = {"redis": [single.port], "cluster": ports}
            if args.only in (None, "drain"):
                print(f"drain: {args.jobs} jobs, {args.workers} worker processes, cluster")
                for shards in (1, args.shards):
                    fill(cluster.url, shards, args.jobs)
                    row = run_processes(
                        cluster.url, shards, ports, args.jobs, args.workers, 0, args.concurrency
                    )
                    results["drain"].append(row)
                    show(f"  cluster, shards={shards}", row)
            if args.only in (None, "curve"):
                counts = [int(n) for n in args.procs.split(",")]
                print(f"curve: {args.jobs} jobs, N workers + N producers (one job per call)")
                for name, url, shards, nodes in (
                    ("redis", single.url, args.redis_shards, [single.port]),
                    ("cluster", cluster.url, args.shards, ports),
                ):
                    if name not in args.targets.split(","):
                        continue
                    for n in counts:
                        flush(url)
                        row = run_processes(url, shards, nodes, args.jobs, n, n, args.concurrency)
                        results["curve"][name].append(row)
                        show(f"  {name}, shards={shards}, {n}+{n} processes", row)
                    at = results["curve"][f"{name}_knee"] = knee(results["curve"][name])
                    where = f"at {at} process(es)" if at else "none within the measured steps"
                    print(f"  {name}: knee {where}")
        finally:
            cluster.stop()
            single.stop()
    results["cpus"] = os.cpu_count()
    results["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        role, url, shards, count, conc = sys.argv[2:7]
        child(role, url, int(shards), int(count), int(conc))
    else:
        main()
