"""Reads and audited actions of the dashboard's workers, queues and history pages.

* ``worker_rows`` — each live worker process with its running jobs (id, task, started,
  runtime) and state (running / quiet / draining); ``quiet_worker`` / ``stop_worker`` send a
  control command (``worker/control.py``), honoured within one heartbeat, to every process of
  the row's ``conveyor worker`` (its ``group``) or, with ``scope="process"``, to that one.
* ``queue_rows`` — per queue: depth by state, latency (age of the oldest pending job), rates
  per minute, paused, the weights live workers give it and the ``limit`` column (``None``: no
  per-queue limit exists yet; a flow-control feature fills it); ``clear_preview`` and
  ``clear_queue`` delete a queue's waiting jobs (``Broker.clear_queue``), never running ones.
* ``history`` — processed / failed per minute or hour (``history.py``).

Every action is audited through ``Operator.audit`` like the others in ``actions.py``.
"""

from __future__ import annotations

from typing import Any

from ..broker.jobdocs import progress_text, read_progress
from ..core.job import validate_queue_name
from ..errors import ValidationError
from ..worker import control
from . import admin
from .actions import Operator
from .history import RANGES, read_history
from .inspect import Inspector
from .metrics import flush_local

#: The states ``clear_queue`` deletes.
CLEARABLE = ("pending", "scheduled", "retry_scheduled")


PROGRESS_SHOWN = 20  # running jobs per worker whose progress the workers page shows


def worker_rows(inspector: Inspector) -> list[dict[str, Any]]:
    """Live workers, each with ``jobs`` (id, task, queue, started_at, runtime) and ``command``."""
    rt = inspector.runtime
    now = rt.now()
    rows = []
    groups: dict[str, str | None] = {}  # group -> its command
    for w in inspector.workers():
        jobs = [j for j in (w.get("jobs") or []) if isinstance(j, dict)]
        if not jobs:  # an older worker: ids only
            jobs = [{"id": str(i)} for i in w["running"]]
        for i, job in enumerate(jobs):
            if i < PROGRESS_SHOWN:  # read live (not from the heartbeat): the page polls
                job["progress"] = progress_text(read_progress(rt.broker, str(job["id"]), now))
            started = job.get("started_at")
            if isinstance(started, int | float) and not isinstance(started, bool):
                job["runtime"] = max(0.0, now - started)
            else:
                job["runtime"] = None
        wid = str(w.get("id", ""))
        command = control.read(rt.broker, wid, now)
        group = w.get("group")
        if isinstance(group, str) and group:
            if group not in groups:
                groups[group] = control.read(rt.broker, control.group_key(group), now)
            command = control.strongest(command, groups[group])
        rows.append({**w, "id": wid, "jobs": jobs, "command": command})
    return rows


#: What a Quiet / Stop reaches: ``group`` — every process of the ``conveyor worker`` command
#: the row belongs to (a worker without a supervisor is a group of one); ``process`` — that one.
SCOPES = ("group", "process")


def _live_worker(inspector: Inspector, worker_id: str) -> dict[str, Any]:
    row = next((w for w in inspector.workers() if str(w.get("id")) == worker_id), None)
    if row is None:
        raise ValidationError("worker", "no live worker has this id (it may have exited)")
    return row


def _command(op: Operator, action: str, command: str, worker_id: str, scope: str) -> str:
    """Send ``command`` to the worker (scope ``process``) or its whole group; audited."""
    if scope not in SCOPES:
        raise ValidationError("scope", f"must be one of {', '.join(SCOPES)}")
    row = _live_worker(op.inspector, worker_id)
    group = row.get("group") if scope == "group" else None
    rt = op.runtime
    if not isinstance(group, str) or not group:
        result = control.send(rt.broker, worker_id, command, rt.now(), op.actor)
        op.audit(action, worker_id, "ok" if result == command else "already stopping")
        return result
    members = sorted(str(w.get("id")) for w in op.inspector.workers() if w.get("group") == group)
    result = control.send(rt.broker, control.group_key(group), command, rt.now(), op.actor)
    outcome = "ok" if result == command else "already stopping"
    op.audit(action, worker_id, outcome, group=group, processes=members)
    return result


def quiet_worker(op: Operator, worker_id: str, scope: str = "group") -> str:
    """Ask a live worker — by default every process of its ``conveyor worker`` (``SCOPES``) —
    to stop claiming new jobs (running ones finish); audited."""
    return _command(op, "worker.quiet", control.QUIET, worker_id, scope)


def stop_worker(op: Operator, worker_id: str, scope: str = "group") -> str:
    """Ask a live worker — by default every process of its ``conveyor worker`` (``SCOPES``) —
    to shut down gracefully (as on SIGTERM); audited. With ``--processes N`` the supervisor
    exits once every process stopped this way."""
    return _command(op, "worker.stop", control.STOP, worker_id, scope)


def queue_rows(inspector: Inspector, minutes: int = 5) -> list[dict[str, Any]]:
    """One row per queue for the queues page (see the module docstring)."""
    weights: dict[str, set[int]] = {}
    for w in inspector.workers():
        for name, weight in (w.get("weights") or {}).items():
            if isinstance(weight, int) and not isinstance(weight, bool):
                weights.setdefault(str(name), set()).add(weight)
    rows = []
    for q in inspector.queues(minutes):
        c = q["counts"]
        rows.append(
            {
                **q,
                "pending": c["pending"],
                "scheduled": c["scheduled"],
                "running": c["active"],
                "retrying": c["retry_scheduled"],
                "dead": c["dead_letter"],
                "waiting": sum(c[s] for s in CLEARABLE),
                "latency": q["oldest_pending_age"],
                "processed_per_minute": q["processed"] / max(1, minutes),
                "failed_per_minute": q["failed"] / max(1, minutes),
                "weights": sorted(weights.get(q["name"], ())),
                "limit": None,
            }
        )
    return rows


def clear_preview(inspector: Inspector, queue: str) -> dict[str, Any]:
    """What clearing ``queue`` would delete now: counts of its waiting and running jobs."""
    validate_queue_name(queue)
    row = next((r for r in queue_rows(inspector) if r["name"] == queue), None)
    if row is None:
        raise ValidationError("queue", f"no queue named {queue!r}")
    return row


def clear_queue(op: Operator, queue: str) -> int:
    """Delete the waiting jobs of an existing queue (running jobs are untouched); audited."""
    clear_preview(op.inspector, queue)
    rt = op.runtime
    n = sum(rt.broker.clear_queue(q, rt.now()) for q in admin.queue_members(rt, queue))
    op.audit("queue.clear", queue, "ok", deleted=n)
    return n


def history(inspector: Inspector, range_name: str, queue: str | None = None) -> dict[str, Any]:
    """Processed / failed points of one range (``RANGES``), optionally of one queue (a
    sharded queue: all its shards)."""
    rt = inspector.runtime
    if queue is not None:
        validate_queue_name(queue)
    if range_name not in RANGES:
        raise ValidationError("range", f"must be one of {', '.join(RANGES)}")
    flush_local(rt)
    members = admin.queue_members(rt, queue) if queue is not None else ()
    return read_history(rt.broker, rt.now(), range_name, queue, members)
