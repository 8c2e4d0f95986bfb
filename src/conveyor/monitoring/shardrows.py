"""One row per LOGICAL queue for status, the CLI and the dashboard (issue 18, sharded queues).

``Inspector.queues`` builds one row per physical queue; ``fold_rows`` merges the rows of a
sharded queue's shards (and of its own name, which holds jobs stored before it was sharded)
into one row named after the logical queue: counts, depth and rates summed, the oldest
pending age the oldest of any shard, paused only when every shard is paused, and
``"shards"``: each shard's name, depth, running count and paused flag (per-shard depth).
Shards are recognised by the app's declaration or, for a process that does not declare them
(a dashboard opened on a URL), by their ``<queue>.shard<N>`` names (``core/shards.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..core.shards import ShardMap, parse_shard

_SUMMED = ("depth", "dead_letters", "throughput_per_minute", "processed", "failed")


def fold_rows(rows: Sequence[dict[str, Any]], shard_map: ShardMap) -> list[dict[str, Any]]:
    """``rows`` (one per physical queue, sorted) with each sharded queue's rows merged."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(shard_map.logical(row["name"]), []).append(row)
    out = []
    for name in sorted(set(groups) | set(shard_map.queues)):
        members = groups.get(name, [])
        if name not in shard_map.queues and all(r["name"] == name for r in members):
            out.extend(members)  # a plain queue
        else:
            out.append(_merge(name, members, shard_map))
    return out


def _merge(name: str, members: list[dict[str, Any]], shard_map: ShardMap) -> dict[str, Any]:
    shards = [r for r in members if r["name"] != name]
    sq = shard_map.get(name)
    declared = sq.names if sq else sorted({r["name"] for r in shards}, key=_index)
    by_name = {r["name"]: r for r in shards}
    counts: dict[str, int] = {}
    for r in members:
        for state, n in r["counts"].items():
            counts[state] = counts.get(state, 0) + n
    ages = [r["oldest_pending_age"] for r in members if r["oldest_pending_age"] is not None]
    merged: dict[str, Any] = {
        "name": name,
        "counts": counts,
        "paused": bool(declared) and all(q in by_name and by_name[q]["paused"] for q in declared),
        "oldest_pending_age": max(ages) if ages else None,
        "workers": max((r["workers"] for r in members), default=0),
        "window_minutes": members[0]["window_minutes"] if members else 0,
    }
    for key in _SUMMED:
        merged[key] = sum(r[key] for r in members)
    merged["failure_rate"] = merged["failed"] / merged["processed"] if merged["processed"] else 0.0
    merged["shards"] = [_shard(q, by_name.get(q)) for q in declared]
    return merged


def _shard(name: str, row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:  # a shard that never held a job
        return {"name": name, "depth": 0, "running": 0, "paused": False}
    return {
        "name": name,
        "depth": row["depth"],
        "running": row["counts"].get("active", 0),
        "paused": row["paused"],
    }


def _index(name: str) -> int:
    parsed = parse_shard(name)
    return parsed[1] if parsed else -1


def merge_counters(parts: Iterable[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Counters by task of several shards (``read_counters(..., by="task")``), summed."""
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for task, counters in part.items():
            into = out.setdefault(task, {})
            for key, n in counters.items():
                into[key] = into.get(key, 0) + n if isinstance(n, int | float) else n
    return out


def merge_series(parts: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per-minute series of several shards (same minutes), summed point by point."""
    if len(parts) == 1:
        return parts[0]
    out = [dict(p) for p in parts[0]]
    for part in parts[1:]:
        for point, add in zip(out, part, strict=True):
            for key, n in add.items():
                if key != "minute" and isinstance(n, int | float):
                    point[key] = point.get(key, 0) + n
    return out


def fold_window(
    window: dict[str, dict[str, Any]], shard_map: ShardMap
) -> dict[str, dict[str, Any]]:
    """Counters by physical queue (``read_counters(..., by="queue")``) -> by logical queue."""
    out: dict[str, dict[str, Any]] = {}
    for name, counters in window.items():
        into = out.setdefault(shard_map.logical(name), {})
        for key, n in counters.items():
            into[key] = into.get(key, 0) + n if isinstance(n, int | float) else n
    return out
