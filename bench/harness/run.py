"""Command line: run the selected scenarios for the selected systems, one system at a time.

    .bench-venv/bin/python -m bench.harness [--quick] [--systems celery,rq] \\
        [--scenarios enqueue,drain] [--merge] [--out bench/results/latest.json]

The harness starts its own redis-server on a free 127.0.0.1 port, measures the raw Redis
ceiling with redis-benchmark, then runs every scenario for every system sequentially (never
two systems at once: the machine has 2 cores), writes the results JSON after each system, and
prints markdown tables.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.harness import pg_server, report
from bench.harness.adapter import BenchContext
from bench.harness.peers import SYSTEMS, available, load_adapter
from bench.harness.redis_server import redis_ceiling, start_redis
from bench.harness.scenarios import DEFAULT_SCENARIOS, FULL, QUICK, SCENARIOS

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "bench" / "results" / "latest.json"


def _clean(value: Any) -> Any:
    """Replace NaN/inf by None so the JSON is standard."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(doc: dict[str, Any], out: Path) -> None:
    """Write ``doc`` atomically (``.tmp`` then rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(doc), indent=2, sort_keys=False) + "\n")
    tmp.replace(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m bench.harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--systems",
        default="",
        help=f"comma list from {','.join(SYSTEMS)} (default: all with an adapter)",
    )
    p.add_argument(
        "--scenarios",
        default=",".join(DEFAULT_SCENARIOS),
        help=f"comma list from {','.join(SCENARIOS)} (tune: try every candidate "
        f"worker setting; not run by default)",
    )
    p.add_argument("--quick", action="store_true", help="smaller counts (drain 5,000 ...)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON path")
    p.add_argument(
        "--merge",
        action="store_true",
        help="update the systems/scenarios run into an existing --out file "
        "(e.g. re-run only conveyor and compare with stored peer results)",
    )
    p.add_argument("--no-ceiling", action="store_true", help="skip redis-benchmark")
    p.add_argument(
        "--crash-window",
        type=float,
        default=None,
        help="seconds the second worker gets to finish the crash-check jobs",
    )
    p.add_argument(
        "--keep-workdir", action="store_true", help="keep job logs and worker output (printed path)"
    )
    p.add_argument("--table-only", action="store_true", help="print the tables of --out and exit")
    return p.parse_args(argv)


def run_system(name: str, ctx: BenchContext, scenarios: list[str], sizes: Any) -> dict[str, Any]:
    """Run ``scenarios`` for one system; failures are recorded, never fatal."""
    adapter = load_adapter(name)(ctx)
    sysdoc: dict[str, Any] = {
        "db": adapter.db,
        "python": adapter.runtime_label(),
        "scenarios": {},
        "errors": {},
    }
    t0 = time.monotonic()
    try:
        sysdoc["version"] = adapter.version()
    except Exception as exc:
        sysdoc["errors"]["version"] = f"{type(exc).__name__}: {exc}"
        print(f"[{name}] cannot run its interpreter: {exc}", flush=True)
        return sysdoc
    sysdoc["modes"] = {m: adapter.describe_mode(m) for m in ("default", "best", "io")}
    sysdoc["loadavg_1min"] = {}
    for scen in scenarios:
        t_s = time.monotonic()
        sysdoc["loadavg_1min"][scen] = round(os.getloadavg()[0], 2)
        print(f"[{name}] {scen} ...", end=" ", flush=True)
        if adapter.supported_scenarios is not None and scen not in adapter.supported_scenarios:
            sysdoc["scenarios"][scen] = {"skipped": f"{name} cannot run {scen}"}
            print("skipped (not applicable)", flush=True)
            continue
        try:
            res = SCENARIOS[scen](adapter, sizes)
            sysdoc["scenarios"][scen] = res
            print(f"{time.monotonic() - t_s:.1f}s  {_summary(res)}", flush=True)
        except Exception as exc:
            tail = adapter.worker_output_tail()
            sysdoc["errors"][scen] = f"{type(exc).__name__}: {exc}\n--- worker output ---\n{tail}"
            print(f"FAILED after {time.monotonic() - t_s:.1f}s: {exc}", flush=True)
            traceback.print_exc(limit=3)
            if tail:
                print("--- last worker output ---\n" + tail, flush=True)
            with contextlib.suppress(Exception):
                adapter.flush()
    sysdoc["seconds"] = time.monotonic() - t0
    return sysdoc


def _summary(res: dict[str, Any]) -> str:
    keys = ("rate", "p50_ms", "p99_ms", "rss_mb", "lost", "duplicated", "skipped")
    parts = []
    for label, node in [("", res), *[(k + ":", v) for k, v in res.items() if isinstance(v, dict)]]:
        got = [
            f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
            for k, v in node.items()
            if k in keys
        ]
        if got:
            parts.append(label + " ".join(got))
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench.harness``."""
    args = parse_args(argv)
    if args.table_only:
        print(report.render(json.loads(args.out.read_text())))
        return 0
    names = [s for s in args.systems.split(",") if s] or available()
    unknown = [n for n in names if n not in SYSTEMS]
    scenarios = [s for s in args.scenarios.split(",") if s]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if unknown or bad:
        print(f"unknown systems {unknown} / scenarios {bad}", file=sys.stderr)
        return 2
    sizes = QUICK if args.quick else FULL
    if args.crash_window is not None:
        sizes = dataclasses.replace(sizes, crash_window=args.crash_window)

    doc: dict[str, Any] = {"systems": {}}
    if args.merge and args.out.exists():
        doc = json.loads(args.out.read_text())
        doc.setdefault("systems", {})
    workdir = Path(tempfile.mkdtemp(prefix="conveyor-bench-"))
    redis = start_redis()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    doc["meta"] = {
        "started": started,
        "quick": args.quick,
        "sizes": dataclasses.asdict(sizes),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "harness_python": sys.version.split()[0],
        "redis_version": redis.version(),
        "systems_run": names,
        "scenarios_run": scenarios,
    }
    print(
        f"redis-server {doc['meta']['redis_version']} on 127.0.0.1:{redis.port}; scratch {workdir}",
        flush=True,
    )
    try:
        if not args.no_ceiling:
            print("[redis] ceiling (redis-benchmark) ...", end=" ", flush=True)
            try:
                doc["redis_ceiling"] = redis_ceiling(redis.port)
                print(json.dumps(doc["redis_ceiling"]), flush=True)
            except Exception as exc:
                doc["redis_ceiling"] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"FAILED: {exc}", flush=True)
        ctx = BenchContext(repo=REPO, redis=redis, workdir=workdir)
        for name in names:
            sysdoc = run_system(name, ctx, scenarios, sizes)
            sysdoc["quick"] = args.quick
            if args.merge and name in doc["systems"]:
                old = doc["systems"][name]
                old_scen = old.get("scenarios", {}) | sysdoc["scenarios"]
                old_err = {k: v for k, v in old.get("errors", {}).items() if k not in scenarios}
                sysdoc["scenarios"] = old_scen
                sysdoc["errors"] = old_err | sysdoc["errors"]
            doc["systems"][name] = sysdoc
            doc["meta"]["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            if (pg_version := pg_server.running_version()) is not None:
                doc["meta"]["postgres_version"] = pg_version
            write_json(doc, args.out)
    finally:
        redis.stop()
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    order = [n for n in SYSTEMS if n in doc["systems"]]
    doc["systems"] = {n: doc["systems"][n] for n in order}
    write_json(doc, args.out)
    print()
    print(report.render(_clean(doc)))
    print(f"\nresults: {args.out}")
    return 0
