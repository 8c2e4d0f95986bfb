"""Before/after table of several harness runs: medians per metric and their ratio.

Used for hot-path changes (docs/benchmarks.md): run the harness alternately on the old and the new
code, each run to its own JSON file, then

    python bench/compare_runs.py '/tmp/before*.json' '/tmp/after*.json'

prints a Markdown table (enqueue, bulk, drain default/best, pickup p50 default/best) for every
system in the files.
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
from typing import Any

Key = tuple[str, str]


def metrics(path: str) -> dict[Key, float]:
    """The compared figures of one results file, by (system, metric)."""
    with open(path) as f:
        systems = json.load(f)["systems"]
    out: dict[Key, float] = {}
    for name, system in systems.items():
        sc: dict[str, Any] = system["scenarios"]
        out[(name, "enqueue/s")] = sc["enqueue"]["rate"]
        out[(name, "bulk/s")] = sc["bulk"]["rate"]
        out[(name, "drain default/s")] = sc["drain"]["default"]["rate"]
        out[(name, "drain best/s")] = sc["drain"]["best"]["rate"]
        out[(name, "pickup p50 default ms")] = sc["latency"]["default"]["p50_ms"]
        out[(name, "pickup p50 best ms")] = sc["latency"]["best"]["p50_ms"]
    return out


def collect(pattern: str) -> dict[Key, list[float]]:
    """Every file matching ``pattern``: each metric's values across the runs."""
    runs = [metrics(path) for path in sorted(glob.glob(pattern))]
    if not runs:
        raise SystemExit(f"no results file matches {pattern!r}")
    return {key: [run[key] for run in runs] for key in runs[0]}


def main(before_pattern: str, after_pattern: str) -> None:
    """Print the Markdown table of medians and ratios."""
    before, after = collect(before_pattern), collect(after_pattern)
    nb, na = len(next(iter(before.values()))), len(next(iter(after.values())))
    head = f"before (median of {nb}) | after (median of {na})"
    print(f"| system | metric | {head} | after ÷ before |")
    print("|---|---|---|---|---|")
    for key, values in before.items():
        old, new = statistics.median(values), statistics.median(after[key])
        print(f"| {key[0]} | {key[1]} | {old:,.1f} | {new:,.1f} | {new / old:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
