"""A workflow as the dashboard shows it: its nodes by level, each with its state and parents.

Level 0 holds the nodes without parents; every other node sits one level below its deepest
parent, so reading the levels top to bottom follows the order the graph runs in.
"""

from __future__ import annotations

from typing import Any

from ..broker.base import Broker
from ..errors import JobNotFound

MAX_NODES = 2000  # a page lists at most this many nodes (a 10,000-job chord says how many more)


def workflow_graph(broker: Broker, workflow_id: str) -> dict[str, Any]:
    """``{"id", "name", "total", "shown", "counts", "levels": [[node, ...], ...]}``; a node is
    ``{"id", "task", "state", "queue", "parents": [ids], "error"}``. ``JobNotFound`` if unknown."""
    jobs = broker.workflow_jobs(workflow_id)
    if not jobs:
        raise JobNotFound(workflow_id)
    parents: dict[str, list[str]] = {}
    for edge in broker.workflow_edges(workflow_id):
        parents.setdefault(edge.child, []).append(edge.parent)
    level: dict[str, int] = {}
    for job in jobs:  # enqueue order is a topological order: parents are built first
        level[job.id] = 1 + max((level.get(p, 0) for p in parents.get(job.id, ())), default=-1)
    counts: dict[str, int] = {}
    levels: list[list[dict[str, Any]]] = []
    for job in jobs[:MAX_NODES]:
        counts[str(job.state)] = counts.get(str(job.state), 0) + 1
        while len(levels) <= level[job.id]:
            levels.append([])
        node = {
            "id": job.id,
            "task": job.task,
            "state": str(job.state),
            "queue": job.queue,
            "parents": parents.get(job.id, [])[:20],
            "more_parents": max(0, len(parents.get(job.id, [])) - 20),
            "error": job.last_error,
        }
        levels[level[job.id]].append(node)
    meta = jobs[0].metadata.get("workflow") if isinstance(jobs[0].metadata, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else ""
    return {
        "id": workflow_id,
        "name": name if isinstance(name, str) else "",
        "total": len(jobs),
        "shown": min(len(jobs), MAX_NODES),
        "counts": counts,
        "levels": [lvl for lvl in levels if lvl],
    }


def workflow_of(job: dict[str, Any]) -> str | None:
    """The workflow id a job's metadata names (None for a plain job or a forged value)."""
    meta = job.get("metadata")
    ref = meta.get("workflow") if isinstance(meta, dict) else None
    wid = ref.get("id") if isinstance(ref, dict) else None
    return wid if isinstance(wid, str) and 0 < len(wid) <= 200 else None
