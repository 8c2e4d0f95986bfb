"""Producer and PostgreSQL server CPU per enqueued job, A/B of source trees (issue 17).

    mkdir -p /tmp/pgenq_base && git archive main --prefix=base/ | tar -x -C /tmp/pgenq_base
    PYTHONPATH=$PWD .venv/bin/python bench/pg_enqueue_cpu.py \\
        --tree base=/tmp/pgenq_base/base/src --tree new=src --rounds 3 [--busy 3]

Starts one private cluster (``tests/support/pg_proc.py``); each round runs every tree in turn
(alternating, a fresh database each run) in a child process that measures, per job, its own
CPU (``process_time``: the producer) and the CPU of every server process (postmaster and
backends, ``psutil``) for:

* ``single``: ``task.enqueue`` one job per call (5,000 jobs);
* ``bulk``: ``app.enqueue_many`` in batches of 1,000 (40,000 jobs).

``--busy K`` first starts K worker processes (one slot each) and gives each a job that sleeps
for the whole run: busy workers whose wake-up connections LISTEN all along, as in production
under load (PostgreSQL signals every LISTENing backend of the database at each NOTIFY). Prints
the min over the rounds per tree and step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SINGLE = 5_000
BULK = 40_000
BATCH = 1_000
REPO = Path(__file__).resolve().parent.parent
_WORKER = """
import sys, time
from conveyor import Conveyor
app = Conveyor(sys.argv[1])
@app.task(name="block")
def block() -> None:
    time.sleep(3600)
@app.task(name="bench_job")
def bench_job(n: int) -> None: ...
app.worker(["default"], concurrency=1).run()
"""


def _server_cpu(pid: int) -> float:
    """User + system CPU seconds of the postmaster and all its children."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def _busy(url: str, k: int) -> list[subprocess.Popen[bytes]]:
    """K worker processes, each running one job that sleeps (its slot taken)."""
    from conveyor import Conveyor, JobState

    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, url]) for _ in range(k)]
    app = Conveyor(url)
    handles = [app.enqueue("block", ()) for _ in range(k)]
    deadline = time.monotonic() + 60
    while any(app.broker.get(h.id).state is not JobState.ACTIVE for h in handles):  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise RuntimeError("the busy workers did not start their jobs")
        time.sleep(0.1)
    app.close()
    time.sleep(1.0)  # every worker past its first claim: its LISTEN connection open
    return procs


def child(url: str, pid: int, busy: int) -> None:
    """Measure the steps on ``url`` with the tree on ``sys.path``; print one JSON line."""
    from conveyor import Conveyor, JobSpec

    procs = _busy(url, busy) if busy else []
    try:
        app = Conveyor(url)

        @app.task(name="bench_job")
        def bench_job(n: int) -> None: ...

        bench_job.enqueue(-1)  # warm: queue registered, connections open
        app.enqueue_many([JobSpec("bench_job", (-2,))])
        out: dict[str, list[float]] = {}

        def step(name: str, n: int, fn: Any) -> None:
            time.sleep(0.5)
            s0, p0 = _server_cpu(pid), time.process_time()
            fn()
            s1, p1 = _server_cpu(pid), time.process_time()
            out[name] = [(p1 - p0) / n * 1e6, (s1 - s0) / n * 1e6]

        step("single", SINGLE, lambda: [bench_job.enqueue(i) for i in range(SINGLE)])
        specs = [JobSpec("bench_job", (i,)) for i in range(BULK)]
        step(
            "bulk",
            BULK,
            lambda: [app.enqueue_many(specs[i : i + BATCH]) for i in range(0, BULK, BATCH)],
        )
        app.close()
        print(json.dumps(out))
    finally:
        for p in procs:
            p.kill()  # a graceful stop would wait for the sleeping job
        for p in procs:
            p.wait(30)


def main(trees: list[tuple[str, str]], rounds: int, busy: int) -> None:
    """Alternate the trees for ``rounds`` rounds on one cluster; print the minima."""
    sys.path.insert(0, str(REPO))
    from tests.support.pg_proc import PgServer

    best: dict[str, dict[str, list[float]]] = {}
    with PgServer() as srv:
        pid = srv.pid()
        assert pid is not None
        for r in range(rounds):
            for label, src in trees:
                env = os.environ | {"PYTHONPATH": f"{Path(src).resolve()}:{REPO}"}
                argv = [sys.executable, __file__, "--child", srv.new_database(), str(pid)]
                run = subprocess.run(
                    [*argv, str(busy)], env=env, capture_output=True, text=True, check=False
                )
                if run.returncode != 0:
                    raise RuntimeError(run.stderr[-3000:])
                got = json.loads(run.stdout.strip().splitlines()[-1])
                print(f"round {r + 1} {label}: {got}", flush=True)
                mine = best.setdefault(label, {})
                for name, (prod, server) in got.items():
                    old = mine.get(name, [float("inf"), float("inf")])
                    mine[name] = [min(old[0], prod), min(old[1], server)]
    for label, steps in best.items():
        for name, (prod, server) in steps.items():
            print(
                f"{label} {name} (busy workers {busy}, min of {rounds}): producer CPU "
                f"{prod:.1f} us/job, server CPU {server:.1f} us/job"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="LABEL=path/to/src")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="busy worker processes")
    a = ap.parse_args()
    main([tuple(t.split("=", 1)) for t in a.tree], a.rounds, a.busy)  # type: ignore[misc]
