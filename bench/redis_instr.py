"""Redis server instructions per job, per script, under callgrind (issue 18: an A/B that a busy
machine cannot blur).

CPU time per job (``redis_cpu.py``) moves by ±10 % when other processes share the cores, which
hides the few-percent effects of a script change. This counts the instructions redis-server
executes inside ``EVALSHA`` (valgrind ``--tool=callgrind --toggle-collect=evalGenericCommand``:
the script, the commands it runs, its argument and reply conversion; not the network, which
the scripts do not change) for:

* ``single``: ``task.enqueue`` one job per call (enqueue_one.lua);
* ``bulk``: ``app.enqueue_many`` in batches of 500 (enqueue.lua);
* ``claim`` / ``complete``: claim.lua and complete.lua, 32 jobs a call (``--limit``),
  interleaved as a worker runs them (the leases set stays small), with ``completed_max=200``
  so the retention trim runs on every completion, as in a long-running deployment;
* ``life_single`` / ``life_bulk``: single or bulk + claim + complete.

The server starts empty, so a tree with the ready-member format gate (``<p>:format``,
broker/redis/fmtgate.py) turns fresh members on at its first enqueue, as a new deployment
does; ``--upgraded`` registers the queue first (a server an older version used: the gate stays
off, every member is ``<seq>:<id>``) to measure that path.

Counts are exact and repeat to within a fraction of a percent; the absolute instruction count
does not convert to µs (that depends on the machine): compare trees. A/B::

    git archive main --prefix=c_base/ | tar -x -C /tmp
    .venv/bin/python bench/redis_instr.py --tree base=/tmp/c_base/src --tree new=src

Needs valgrind (``callgrind_control``) and redis-server; each tree runs in a subprocess with a
fresh server. ~1 minute per tree with the default 640 jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

JOBS = 640
TASK = "bench_job"  # --task: e.g. a dotted name as applications use
LIMIT = 32  # --limit: jobs per claim call (1: a worker fed one job at a time)
STEPS = ("single", "bulk", "claim", "complete", "life_single", "life_bulk")


def totals(text: str) -> int:
    """The instruction total of a callgrind dump (its ``totals:`` or ``summary:`` line)."""
    for line in text.splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError("no totals line in the callgrind dump")


class Callgrind:
    """A redis-server under callgrind on a free port; ``count(fn)`` = instructions of ``fn``."""

    def __init__(self) -> None:
        self.where = tempfile.mkdtemp(prefix="redis_instr_")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--toggle-collect=evalGenericCommand",
                f"--callgrind-out-file={self.where}/callgrind.out.%p",
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.where,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.proc.pid)], capture_output=True)

    def count(self, fn: Any) -> int:
        """Instructions executed inside EVALSHA while ``fn`` runs."""
        self._control("-z")
        fn()
        before = set(glob.glob(f"{self.where}/callgrind.out.*"))
        self._control("-d")
        new = set(glob.glob(f"{self.where}/callgrind.out.*")) - before
        total = 0
        for path in new:
            with open(path, encoding="utf-8", errors="replace") as fh:
                total += totals(fh.read())
            os.remove(path)
        return total

    def close(self) -> None:
        """Stop the server and drop its directory."""
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.where, ignore_errors=True)


def measure(
    jobs: int, upgraded: bool = False, task: str = TASK, limit: int = LIMIT
) -> dict[str, float]:
    """One run of every step on a fresh server under callgrind: instructions per job
    (``upgraded``: the queue registered before the first enqueue, as an older version left it;
    ``task``: the task's name, which the claim copies into its event rows; ``limit``: jobs per
    claim call, and so per completion call)."""
    from conveyor import Conveyor, JobSpec
    from conveyor.broker.records import Ack

    logging.disable(logging.WARNING)
    cg = Callgrind()
    try:
        app = Conveyor(cg.url)
        broker: Any = app.broker
        broker.retention = dataclasses.replace(broker.retention, completed_max=200)
        if upgraded:
            broker.client.sadd(broker.keys.queues, "default")

        @app.task(name=task)
        def bench_job(n: int) -> None:
            return None

        def drain(per_call: int = limit) -> tuple[int, int]:
            now, claimed, completed = time.time(), 0, 0
            while True:
                leases: list[Any] = []
                claimed += cg.count(functools.partial(_claim, broker, now, leases, per_call))
                if not leases:
                    return claimed, completed
                acks = [Ack(lease.job.id, lease.token) for lease in leases]
                completed += cg.count(functools.partial(broker.complete, acks, now))

        for i in range(300):  # warm: scripts loaded, the completed set past its cap
            bench_job.enqueue(-i)
        drain(LIMIT)  # the warm-up in calls of 32 whatever --limit says (quicker)
        out: dict[str, float] = {}
        out["single"] = cg.count(lambda: [bench_job.enqueue(i) for i in range(jobs)]) / jobs
        claim_single, complete_single = drain()
        specs = [JobSpec(task, (i,)) for i in range(jobs)]
        out["bulk"] = (
            cg.count(lambda: [app.enqueue_many(specs[i : i + 500]) for i in range(0, jobs, 500)])
            / jobs
        )
        claim_bulk, complete_bulk = drain()
        out["claim"] = (claim_single + claim_bulk) / 2 / jobs
        out["complete"] = (complete_single + complete_bulk) / 2 / jobs
        out["life_single"] = out["single"] + (claim_single + complete_single) / jobs
        out["life_bulk"] = out["bulk"] + (claim_bulk + complete_bulk) / jobs
        broker.close()
        return out
    finally:
        cg.close()


def _claim(broker: Any, now: float, into: list[Any], limit: int) -> None:
    into.extend(broker.claim(["default"], now, limit=limit, worker_id="worker-1"))


def compare(
    trees: list[tuple[str, str]],
    jobs: int,
    upgraded: bool = False,
    task: str = TASK,
    limit: int = LIMIT,
) -> None:
    """Run each tree once (counts repeat exactly) and print thousands of instructions per job."""
    results: dict[str, dict[str, float]] = {}
    for label, src in trees:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
        line = subprocess.run(
            [sys.executable, __file__, "--jobs", str(jobs), "--json", "--task", task]
            + ["--limit", str(limit)]
            + (["--upgraded"] if upgraded else []),
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()[-1]
        results[label] = json.loads(line)
    _print(results)


def _print(results: dict[str, dict[str, float]]) -> None:
    labels = list(results)
    print("kinstr/job".ljust(14) + "".join(f"{label:>12}" for label in labels))
    for step in STEPS:
        values = [results[label][step] / 1e3 for label in labels]
        row = step.ljust(14) + "".join(f"{v:>12.1f}" for v in values)
        if len(values) > 1 and values[0]:
            row += f"{100 * (values[-1] / values[0] - 1):>+10.1f} %"
        print(row)


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="LABEL=SRC_DIR")
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--task", default=TASK, help="the task's name (its length matters)")
    parser.add_argument("--limit", type=int, default=LIMIT, help="jobs per claim call")
    parser.add_argument(
        "--upgraded", action="store_true", help="queue registered first: format gate off"
    )
    ns = parser.parse_args()
    if ns.tree:
        trees = [tuple(t.split("=", 1)) for t in ns.tree]
        compare(trees, ns.jobs, ns.upgraded, ns.task, ns.limit)  # type: ignore[arg-type]
        return
    result = measure(ns.jobs, ns.upgraded, ns.task, ns.limit)
    if ns.json:
        print(json.dumps(result))
    else:
        _print({"this": result})


if __name__ == "__main__":
    main()
