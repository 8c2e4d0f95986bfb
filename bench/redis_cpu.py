"""Redis server CPU per job, step by step, on a private redis-server (issue 18 item 1).

Each step reads the server's ``used_cpu_sys + used_cpu_user`` (INFO cpu) and ``INFO
commandstats`` before and after, and prints µs of server CPU per job (request overhead
included) and the script's own time per call (``usec_per_call`` of evalsha / fcall):

* ``noop``: an EVALSHA of ``return 1`` and a bare LPUSH from redis-py (the floor of one call);
* ``single``: ``task.enqueue`` one job per call;
* ``bulk``: ``app.enqueue_many`` in batches of 1,000;
* ``drain``: a threaded worker with the CLI's defaults (32 slots) claims and completes the
  bulk jobs (``drain_single``: the single-enqueued ones);
* ``lifecycle``: single + drain, and bulk + drain (the sums, per job);
* ``threads_batched``: 8 threads enqueue one job per call with ``autobatch=AutoBatch()`` (the
  opt-in auto-batching producer; skipped for a tree without it).

A/B of two source trees, alternating, fresh server each run, min of ``--rounds``::

    git archive main --prefix=c_base/ | tar -x -C /tmp
    .venv/bin/python bench/redis_cpu.py --tree base=/tmp/c_base/src --tree new=src --rounds 3

One tree (the one on PYTHONPATH) with ``--one LABEL``; ``--json`` prints one JSON line.
``--commandstats`` adds, per step, where the server time went (µs per job): each command run
inside the scripts (commandstats counts those too), ``script glue`` (the scripts' own time
minus the commands they ran: Lua, argument and reply conversion) and ``request`` (server CPU
minus every command's time: reading, parsing and answering the calls, the event loop).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

SINGLE = 3_000
BULK = 20_000
BATCH = 1_000
NOOP = 3_000
THREADS = 8
STEPS = (
    "noop_evalsha",
    "noop_lpush",
    "single",
    "bulk",
    "drain",
    "life_single",
    "life_bulk",
    "threads_batched",
)
SCRIPT_CMDS = ("cmdstat_evalsha", "cmdstat_fcall", "cmdstat_eval")
METER_CMDS = ("cmdstat_info", "cmdstat_config|resetstat")  # the meter's own calls


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server() -> tuple[subprocess.Popen[bytes], str, str]:
    """A private redis-server on a free loopback port: (process, url, its directory)."""
    where = tempfile.mkdtemp(prefix="redis_cpu_")
    port = _free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            where,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0", where


class Meter:
    """Server CPU and commandstats around one step."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)

    def cpu(self) -> float:
        """used_cpu_sys + used_cpu_user in seconds."""
        info = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def step(self, jobs: int, run: Callable[[], Any]) -> dict[str, float]:
        """Run ``run`` and return server µs per job and the scripts' µs per call."""
        self.client.config_resetstat()
        before = self.cpu()
        run()
        after = self.cpu()
        stats = self.client.info("commandstats")
        calls = usec = 0
        for name in SCRIPT_CMDS:
            calls += int(stats.get(name, {}).get("calls", 0))
            usec += int(stats.get(name, {}).get("usec", 0))
        out: dict[str, Any] = {
            "us_per_job": 1e6 * (after - before) / jobs,
            "script_us_per_call": usec / calls if calls else 0.0,
            "script_us_per_job": usec / jobs,
        }
        if COMMANDSTATS:
            out["cmds"] = breakdown(stats, jobs, out["us_per_job"])
        return out


COMMANDSTATS = bool(os.environ.get("BENCH_COMMANDSTATS"))  # set by --commandstats


def breakdown(stats: dict[str, Any], jobs: int, server_us: float) -> dict[str, float]:
    """µs per job by command from an ``INFO commandstats`` reply, plus ``script glue`` (the
    scripts' time minus the commands they ran) and ``request`` (server CPU minus all commands).

    A script's ``usec`` includes the commands it runs, which commandstats also counts on their
    own; the meter's INFO / CONFIG RESETSTAT calls are left out.
    """
    mine = {k: v for k, v in stats.items() if k.startswith("cmdstat_") and k not in METER_CMDS}
    scripts = sum(int(v["usec"]) for k, v in mine.items() if k in SCRIPT_CMDS)
    nested = sum(int(v["usec"]) for k, v in mine.items() if k not in SCRIPT_CMDS)
    out = {
        k.removeprefix("cmdstat_"): int(v["usec"]) / jobs
        for k, v in mine.items()
        if k not in SCRIPT_CMDS
    }
    # a command the client sends itself (a bare LPUSH) is outside every script: the scripts'
    # glue is only what their time exceeds the commands by
    out["script glue"] = max(0, scripts - nested) / jobs if scripts else 0.0
    out["request"] = server_us - max(scripts, nested) / jobs
    return out


def measure() -> dict[str, dict[str, float]]:
    """One run of every step on a fresh private server."""
    from conveyor import Conveyor, JobSpec

    logging.disable(logging.WARNING)
    proc, url, where = _start_server()
    try:
        meter = Meter(url)
        out: dict[str, dict[str, float]] = {}
        raw = meter.client
        sha = raw.script_load("return 1")
        out["noop_evalsha"] = meter.step(NOOP, lambda: [raw.evalsha(sha, 0) for _ in range(NOOP)])
        out["noop_lpush"] = meter.step(NOOP, lambda: [raw.lpush("x", "1") for _ in range(NOOP)])
        raw.delete("x")
        app = Conveyor(url)

        @app.task
        def bench_job(n: int) -> None:
            return None

        bench_job.enqueue(-1)  # warm: scripts loaded, queue registered, connections open
        _drain(app, 1)
        out["single"] = meter.step(SINGLE, lambda: [bench_job.enqueue(i) for i in range(SINGLE)])
        out["drain_single"] = meter.step(SINGLE, lambda: _drain(app, SINGLE))
        specs = [JobSpec("bench_job", (i,)) for i in range(BULK)]
        out["bulk"] = meter.step(
            BULK,
            lambda: [app.enqueue_many(specs[i : i + BATCH]) for i in range(0, BULK, BATCH)],
        )
        out["drain"] = meter.step(BULK, lambda: _drain(app, BULK))
        out["life_single"] = _sum(out["single"], out["drain_single"])
        out["life_bulk"] = _sum(out["bulk"], out["drain"])
        app.broker.close()
        _threads_step(meter, url, out)
        return out
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(where, ignore_errors=True)


def _threads_step(meter: Meter, url: str, out: dict[str, dict[str, float]]) -> None:
    """``threads``: THREADS threads enqueue one job per call with ``autobatch=AutoBatch()``
    (skipped on a tree without it)."""
    import conveyor

    if not hasattr(conveyor, "AutoBatch"):
        return
    app = conveyor.Conveyor(url + "?prefix=bt", autobatch=conveyor.AutoBatch())

    @app.task
    def bench_job(n: int) -> None:
        return None

    bench_job.enqueue(-1)  # connects before the clock starts
    per = SINGLE // THREADS

    def produce() -> None:
        threads = [
            threading.Thread(target=lambda: [bench_job.enqueue(i) for i in range(per)])
            for _ in range(THREADS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    out["threads_batched"] = meter.step(per * THREADS, produce)
    app.broker.close()


def _drain(app: Any, jobs: int) -> None:
    worker = app.worker(
        ["default"], concurrency=32, handle_signals=False, heartbeat=False, max_jobs=jobs
    )
    worker.run()


def _sum(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {k: a[k] + b[k] for k in ("us_per_job", "script_us_per_job")} | {
        "script_us_per_call": 0.0
    }
    if "cmds" in a and "cmds" in b:
        names = set(a["cmds"]) | set(b["cmds"])
        out["cmds"] = {n: a["cmds"].get(n, 0.0) + b["cmds"].get(n, 0.0) for n in names}
    return out


def compare(trees: list[tuple[str, str]], rounds: int) -> None:
    """Alternate the trees ``rounds`` times and print the min per step."""
    best: dict[str, dict[str, dict[str, float]]] = {}
    for _ in range(rounds):
        for label, src in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
            if COMMANDSTATS:
                env["BENCH_COMMANDSTATS"] = "1"
            line = (
                subprocess.run(
                    [sys.executable, __file__, "--one", label, "--json"],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            result = json.loads(line)
            mine = best.setdefault(label, {})
            for step, row in result.items():
                old = mine.get(step)
                if old is None or row["us_per_job"] < old["us_per_job"]:
                    mine[step] = row
    _print(best)


def _print(best: dict[str, dict[str, dict[str, float]]]) -> None:
    labels = list(best)
    head = "step".ljust(14) + "".join(
        f"{label + ' us/job':>16}{label + ' lua/call':>18}" for label in labels
    )
    print(head)
    for step in (*STEPS, "drain_single"):
        row = step.ljust(14)
        for label in labels:
            r = best[label].get(step)
            row += f"{r['us_per_job']:>16.1f}{r['script_us_per_call']:>18.1f}" if r else " " * 34
        print(row)
    if any("cmds" in r for rows in best.values() for r in rows.values()):
        _print_breakdown(best)


def _print_breakdown(best: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Per step, µs per job by command (``--commandstats``), one column per tree."""
    labels = list(best)
    for step in ("single", "bulk", "drain", "drain_single", "life_single", "life_bulk"):
        rows = [best[label].get(step, {}).get("cmds", {}) for label in labels]
        names = sorted(set().union(*rows), key=lambda n: -max(r.get(n, 0.0) for r in rows))
        print(f"\n{step} (us/job)".ljust(25) + "".join(f"{label:>12}" for label in labels))
        for name in names:
            values = [r.get(name, 0.0) for r in rows]
            if max(values) >= 0.01:
                print(f"  {name:22}" + "".join(f"{v:>12.2f}" for v in values))


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="LABEL=SRC_DIR")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", metavar="LABEL")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--commandstats",
        action="store_true",
        help="also print µs per job by command, script glue and request cost per step",
    )
    ns = parser.parse_args()
    if ns.commandstats:
        global COMMANDSTATS
        COMMANDSTATS = True
    if ns.tree:
        compare([tuple(t.split("=", 1)) for t in ns.tree], ns.rounds)  # type: ignore[misc]
        return
    result = measure()
    if ns.json:
        print(json.dumps(result))
    else:
        _print({ns.one or "this": result})


if __name__ == "__main__":
    main()
