"""The PostgreSQL table: Conveyor on PostgreSQL beside procrastinate and pgqueuer.

Same metrics and marks as the main table (:mod:`bench.harness.report`), one column per system
on the harness's PostgreSQL, plus "best PG peer" and "conveyor-postgres ÷ best PG peer" (best =
highest rate, lowest latency/RSS/loss among procrastinate and pgqueuer).
"""

from __future__ import annotations

from typing import Any

from bench.harness import report
from bench.harness.peers import POSTGRES

CONVEYOR = "conveyor-postgres"


def _ratio(vals: dict[str, float | None], peers: list[str], higher: bool) -> list[str]:
    peer_vals = [(v, p) for p in peers if (v := vals[p]) is not None]
    if not peer_vals:
        return ["—", "—"]
    best_val, best_name = (max if higher else min)(peer_vals)
    ties = [p for v, p in peer_vals if v == best_val]
    who = best_name if len(ties) == 1 else ", ".join(ties)
    conv = vals.get(CONVEYOR)
    if conv is None:
        return [who, "—"]
    if best_val == 0:
        return [who, "=" if conv == 0 else "∞"]
    return [who, f"{conv / best_val:.2f}x"]


def postgres_table(doc: dict[str, Any]) -> str:
    """Metrics x PostgreSQL systems, with the ratio to the best PostgreSQL peer."""
    systems = {n: s for n, s in doc.get("systems", {}).items() if n in POSTGRES}
    names = [n for n in POSTGRES if n in systems]
    if not names:
        return ""
    peers = [n for n in names if n != CONVEYOR]
    with_ratio = CONVEYOR in names and bool(peers)
    head = ["metric (PostgreSQL)", *names]
    head += ["best PG peer", f"{CONVEYOR} ÷ best PG peer"] if with_ratio else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, path, higher, dec in report.METRICS:
        if path[-1] == report.CPU:  # a Redis server's CPU: meaningless for PostgreSQL systems
            continue
        scen = {n: systems[n].get("scenarios", {}) for n in names}
        vals = {n: report._num(report._get(*path)(scen[n])) for n in names}
        if all(v is None for v in vals.values()):
            continue
        cells = [label]
        for n in names:
            mark = (
                report._marks(report._parent(*path)(scen[n]), path) if vals[n] is not None else ""
            )
            cells.append(report._fmt(vals[n], dec) + mark)
        if with_ratio:
            cells += _ratio(vals, peers, higher)
        lines.append("| " + " | ".join(cells) + " |")
    version = doc.get("meta", {}).get("postgres_version")
    title = f"PostgreSQL {version}" if version else "PostgreSQL"
    return f"#### {title}: Conveyor beside procrastinate and pgqueuer\n\n" + "\n".join(lines)
