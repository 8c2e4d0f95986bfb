"""Markdown tables from a results document (``bench/results/latest.json``).

The main table has one row per metric and one column per system, plus "best peer" and
"conveyor ÷ best peer" when a ``conveyor`` column exists. For rates the best peer is the
highest; for latency, memory and crash damage the lowest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from bench.harness.peers import BACKENDS, POSTGRES

Getter = Callable[[dict[str, Any]], Any]


def _get(*path: str) -> Getter:
    def get(scen: dict[str, Any]) -> Any:
        cur: Any = scen
        for key in path:
            if not isinstance(cur, dict) or key not in cur:
                return None
            cur = cur[key]
        return cur

    return get


def _parent(*path: str) -> Getter:
    return _get(*path[:-1])


#: (label, path into a system's "scenarios", higher is better, decimals)
CPU = "redis_cpu_us_per_job"
METRICS: list[tuple[str, tuple[str, ...], bool, int]] = [
    ("enqueue, 1 call/job (jobs/s)", ("enqueue", "rate"), True, 0),
    ("└ Redis CPU per job (µs)", ("enqueue", CPU), False, 1),
    ("bulk enqueue (jobs/s)", ("bulk", "rate"), True, 0),
    ("└ Redis CPU per job (µs)", ("bulk", CPU), False, 1),
    ("drain, default settings (jobs/s)", ("drain", "default", "rate"), True, 0),
    ("└ Redis CPU per job (µs)", ("drain", "default", CPU), False, 1),
    ("drain, best settings (jobs/s)", ("drain", "best", "rate"), True, 0),
    ("└ Redis CPU per job (µs)", ("drain", "best", CPU), False, 1),
    ("pickup p50, default (ms)", ("latency", "default", "p50_ms"), False, 1),
    ("pickup p99, default (ms)", ("latency", "default", "p99_ms"), False, 1),
    ("pickup p50, best (ms)", ("latency", "best", "p50_ms"), False, 1),
    ("pickup p99, best (ms)", ("latency", "best", "p99_ms"), False, 1),
    ("I/O 10 ms jobs, concurrency 100 (jobs/s)", ("io", "rate"), True, 0),
    ("└ Redis CPU per job (µs)", ("io", CPU), False, 1),
    ("idle RSS, default (MB)", ("rss", "default", "rss_mb"), False, 1),
    ("idle RSS, best (MB)", ("rss", "best", "rss_mb"), False, 1),
    ("crash: lost jobs", ("crash", "lost"), False, 0),
    ("crash: duplicated jobs", ("crash", "duplicated"), False, 0),
    ("crash: Redis CPU per job (µs)", ("crash", CPU), False, 1),
]


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
        return None
    return float(v)


def _fmt(v: float | None, decimals: int) -> str:
    if v is None:
        return "—"
    return f"{v:,.{decimals}f}"


def _marks(node: Any, path: tuple[str, ...]) -> str:
    """Footnote marks: * reduced count, † group idiom, ! incomplete, § saturated."""
    marks = ""
    if isinstance(node, dict):
        if "reduced_from" in node:
            marks += "*"
        if node.get("complete") is False:
            marks += "!"
        if path[0] == "bulk" and "group" in str(node.get("api", "")):
            marks += "†"
        if node.get("saturated"):
            marks += "§"
        if path[0] == "io" and node.get("concurrency", 100) != 100:
            marks += f" (c={node['concurrency']})"
    return marks


def main_table(doc: dict[str, Any]) -> str:
    """The metrics x systems markdown table (every system on the harness's Redis)."""
    systems = {
        n: s for n, s in doc.get("systems", {}).items() if n not in BACKENDS and n not in POSTGRES
    }
    names = list(systems)
    if not names:
        return ""
    peers = [n for n in names if n != "conveyor"]
    with_ratio = "conveyor" in names and bool(peers)
    head = ["metric", *names] + (["best peer", "conveyor ÷ best peer"] if with_ratio else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, path, higher, dec in METRICS:
        vals = {n: _num(_get(*path)(systems[n].get("scenarios", {}))) for n in names}
        cells = [label]
        for n in names:
            node = _parent(*path)(systems[n].get("scenarios", {}))
            cells.append(_fmt(vals[n], dec) + (_marks(node, path) if vals[n] is not None else ""))
        if with_ratio:
            cells += _ratio_cells(vals, peers, higher)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio_cells(vals: dict[str, float | None], peers: list[str], higher: bool) -> list[str]:
    """["best peer", "conveyor ÷ best peer"] cells for one metric."""
    peer_vals = [(v, p) for p in peers if (v := vals[p]) is not None]
    conv = vals.get("conveyor")
    if not peer_vals:
        return ["—", "—"]
    best_val, best_name = (max if higher else min)(peer_vals)
    ties = [p for v, p in peer_vals if v == best_val]
    who = best_name if len(ties) == 1 else ("all" if len(ties) == len(peers) else ", ".join(ties))
    if conv is None:
        return [who, "—"]
    if best_val == 0:
        return [who, "=" if conv == 0 else "∞"]
    return [who, f"{conv / best_val:.2f}x"]


#: Issue 21's targets: (label, Conveyor's path, leader, leader's candidate paths, goal, higher).
#: The leader's figure is its best over the candidate paths (fastest rate, lowest CPU).
TARGETS: list[tuple[str, tuple[str, ...], str, list[tuple[str, ...]], float, bool]] = [
    (
        "drain, Conveyor defaults ÷ BullMQ at concurrency 50",
        ("drain", "default", "rate"),
        "bullmq",
        [("drain", "best", "rate")],
        1.0,
        True,
    ),
    (
        "drain, Conveyor defaults ÷ Sidekiq",
        ("drain", "default", "rate"),
        "sidekiq",
        [("drain", "default", "rate"), ("drain", "best", "rate")],
        3.0,
        True,
    ),
    (
        "drain, best settings ÷ BullMQ's best",
        ("drain", "best", "rate"),
        "bullmq",
        [("drain", "default", "rate"), ("drain", "best", "rate")],
        1.5,
        True,
    ),
    ("bulk enqueue ÷ Sidekiq push_bulk", ("bulk", "rate"), "sidekiq", [("bulk", "rate")], 1, True),
    ("single enqueue ÷ BullMQ", ("enqueue", "rate"), "bullmq", [("enqueue", "rate")], 1.0, True),
    ("single enqueue ÷ Sidekiq", ("enqueue", "rate"), "sidekiq", [("enqueue", "rate")], 1.0, True),
    (
        "Redis CPU per drained job, defaults ÷ Sidekiq",
        ("drain", "default", CPU),
        "sidekiq",
        [("drain", "default", CPU), ("drain", "best", CPU)],
        1.0,
        False,
    ),
    (
        "Redis CPU per drained job, best settings ÷ Sidekiq",
        ("drain", "best", CPU),
        "sidekiq",
        [("drain", "default", CPU), ("drain", "best", CPU)],
        1.0,
        False,
    ),
]


def targets_table(doc: dict[str, Any]) -> str:
    """Conveyor ÷ leader for every issue-21 target, with the goal and whether it was met."""
    systems: dict[str, Any] = doc.get("systems", {})
    if "conveyor" not in systems or not any(n in systems for n in ("bullmq", "sidekiq")):
        return ""
    conv = systems["conveyor"].get("scenarios", {})
    lines = [
        "| target | conveyor | leader | conveyor ÷ leader | goal | met |",
        "|---|---|---|---|---|---|",
    ]
    for label, path, leader, paths, goal, higher in TARGETS:
        mine = _num(_get(*path)(conv))
        scen = systems.get(leader, {}).get("scenarios", {})
        theirs = [v for p in paths if (v := _num(_get(*p)(scen))) is not None]
        best = (max if higher else min)(theirs) if theirs else None
        ratio = mine / best if mine is not None and best else None
        ok = ratio is not None and (ratio >= goal if higher else ratio <= goal)
        met = "—" if ratio is None else ("yes" if ok else "no")
        sign = "≥" if higher else "≤"
        dec = 0 if higher else 1
        lines.append(
            f"| {label} | {_fmt(mine, dec)} | {leader} {_fmt(best, dec)} | "
            f"{'—' if ratio is None else f'{ratio:.2f}x'} | {sign} {goal:g}x | {met} |"
        )
    lost = _num(_get("crash", "lost")(conv))
    met = "—" if lost is None else ("yes" if lost == 0 else "no")
    lines.append(f"| crash check: lost jobs | {_fmt(lost, 0)} | — | — | 0 | {met} |")
    return "\n".join(lines)


def backends_table(doc: dict[str, Any]) -> str:
    """Conveyor on Redis, SQLite and memory side by side (no peers; absolute figures)."""
    systems: dict[str, Any] = doc.get("systems", {})
    names = [n for n in ("conveyor", *BACKENDS, "conveyor-postgres") if n in systems]
    if not any(n != "conveyor" for n in names):
        return ""
    head = ["metric", *[n.replace("conveyor-", "conveyor on ") for n in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, path, _, dec in METRICS:
        cells = [label]
        for n in names:
            scen = systems[n].get("scenarios", {})
            val = _num(_get(*path)(scen))
            cells.append(_fmt(val, dec) + (_marks(_parent(*path)(scen), path) if val else ""))
        if any(c != "—" for c in cells[1:]):
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ceiling_table(doc: dict[str, Any]) -> str:
    """Raw Redis requests/s from redis-benchmark, measured in the same run."""
    ceil = doc.get("redis_ceiling") or {}
    if not ceil or "error" in ceil:
        return f"Redis ceiling: {ceil.get('error', 'not measured')}"
    ops = ["SET", "LPUSH", "RPOP"]
    lines = ["| redis-benchmark (req/s) | " + " | ".join(ops) + " |", "|---|---|---|---|"]
    for label, key in (("unpipelined", "unpipelined"), ("pipelined -P 16", "pipelined_16")):
        row = ceil.get(key, {})
        lines.append(f"| {label} | " + " | ".join(_fmt(_num(row.get(o)), 0) for o in ops) + " |")
    rtt = _num((ceil.get("ping_rtt_us") or {}).get("median"))
    if rtt is not None:
        lines.append(f"\nLoopback round trip (PING, one connection, median): {rtt:,.0f} µs")
    return "\n".join(lines)


def notes(doc: dict[str, Any]) -> str:
    """Versions, worker command lines, reduced counts and errors, as a bullet list."""
    out = [
        "* reduced job count for a slow system (see reduced_from in the JSON); "
        "! did not complete in time (rate over finished jobs); "
        "† no bulk API, measured the group idiom; § saturated: the worker could not keep up "
        "with one job per 10 ms, so latency includes queueing; — not applicable or failed."
    ]
    for name, sysdoc in doc.get("systems", {}).items():
        scen = sysdoc.get("scenarios", {})
        best = _get("drain", "best", "worker")(scen)
        line = f"- **{name}** {sysdoc.get('version', '?')}"
        if best:
            line += f"; best: `{best}`"
        for key, val in sorted(_reduced(scen).items()):
            line += f"; {key} ran {val[1]:,} jobs instead of {val[0]:,}"
        for key in ("drain.default", "drain.best", "io"):
            node = _get(*key.split("."))(scen)
            if isinstance(node, dict) and node.get("duplicated"):
                line += f"; {key}: {node['duplicated']} job(s) ran twice without any crash"
        crash = scen.get("crash", {})
        if "lost" in crash:
            line += (
                f"; crash: {crash['in_flight_at_kill']} in flight at kill, waited until "
                f"{crash.get('idle_s', 0):.0f}s idle (max {crash['window_s']:.0f}s)"
            )
            if crash.get("mode", "default") != "default":
                line += f" with `{crash.get('worker')}`"
            if crash.get("followup_s"):
                late_s = _num(crash.get("all_done_s_after_restart_late"))
                line += (
                    f"; of the {crash['lost']} lost, {crash['recovered_after_window']} came back "
                    f"after the window (all done {_fmt(late_s, 0)} s after the restart; waited "
                    f"{crash['followup_s']:.0f} s more)"
                )
        for scen_name, err in sysdoc.get("errors", {}).items():
            line += f"; **{scen_name} failed**: {str(err).splitlines()[0][:160]}"
        out.append(line)
    return "\n".join(out)


def _reduced(scen: dict[str, Any]) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            if "reduced_from" in node:
                found[key] = (int(node["reduced_from"]), int(node.get("count", 0)))
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else k)

    walk(scen, "")
    return found


def tune_table(doc: dict[str, Any]) -> str:
    """Drain rates of every candidate worker setting, when the ``tune`` scenario ran."""
    lines: list[str] = []
    for name, sysdoc in doc.get("systems", {}).items():
        tune = (sysdoc.get("scenarios") or {}).get("tune")
        if not tune:
            continue
        if not lines:
            lines = [
                "| system | mode | drain jobs/s (median) | rounds | worker |",
                "|---|---|---|---|---|",
            ]
        for mode, res in tune.items():
            rounds = ", ".join(_fmt(_num(r), 0) for r in res.get("rates", []))
            lines.append(
                f"| {name} | {mode} | {_fmt(_num(res.get('rate')), 0)} | {rounds} | "
                f"`{res.get('worker', '')}` |"
            )
    return "\n".join(lines)


def load_warning(doc: dict[str, Any]) -> str:
    """Warnings: other work competing for the CPU; quick and full runs merged in one table."""
    kinds = {n: s.get("quick") for n, s in doc.get("systems", {}).items() if "quick" in s}
    mixed = ""
    if len(set(kinds.values())) > 1:
        quick = ", ".join(n for n, q in kinds.items() if q)
        mixed = (
            f"**Warning:** merged results mix --quick ({quick}) and full-size runs; "
            "rates are comparable only roughly.\n\n"
        )
    return mixed + _cpu_warning(doc)


def _cpu_warning(doc: dict[str, Any]) -> str:
    """A warning when other work was running on the machine during the measurements."""
    cores = doc.get("meta", {}).get("cores") or 1
    busy = {}
    for name, sysdoc in doc.get("systems", {}).items():
        loads = (sysdoc.get("loadavg_1min") or {}).values()
        if loads and max(loads) > cores + 1:  # the benchmark itself accounts for ~1-2
            busy[name] = max(loads)
    if not busy:
        return ""
    listed = ", ".join(f"{n} {v:.1f}" for n, v in busy.items())
    return (
        f"**Warning:** the 1-minute load average (which includes the benchmark's own ~1-2) "
        f"exceeded {cores + 1} on {cores} cores while measuring ({listed}): other processes "
        f"competed for the CPU, so those figures are noisy. Re-run on a quiet machine."
    )


def render(doc: dict[str, Any]) -> str:
    """Everything printed at the end of a run."""
    from bench.harness import report_pg  # imports this module

    meta = doc.get("meta", {})
    title = (
        f"Conveyor benchmark — {'quick' if meta.get('quick') else 'full'} run, "
        f"{meta.get('cores', '?')} cores, redis {meta.get('redis_version', '?')}"
    )
    parts = [
        f"### {title}",
        main_table(doc),
        targets_table(doc),
        backends_table(doc),
        report_pg.postgres_table(doc),
        tune_table(doc),
        ceiling_table(doc),
        notes(doc),
        load_warning(doc),
    ]
    return "\n\n".join(p for p in parts if p)
