"""THE read API of the CLI and the dashboard: queues, workers, jobs, schedules, alerts, metrics.

``Inspector(app)`` returns plain JSON-ready dicts (or a ``Page`` of jobs), so the CLI's
``--json``, the HTTP API and the HTML templates all show the same data. Operator actions live
next door in ``monitoring.actions``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..broker import jobdocs
from ..broker.base import Broker, Page
from ..core.job import Job, validate_queue_name, validate_task_name
from ..core.state import JobState
from ..errors import JobNotFound, ValidationError
from ..runtime import Runtime, as_runtime
from . import admin
from .admin import worker_queues
from .events import EventReader, check_cursor, job_events
from .filters import MAX_PAGE, clean_filters
from .limits import flow_waits, why_waiting
from .metrics import flush_local, read_counters, series, summarize
from .shardrows import fold_rows, merge_counters, merge_series
from .workflows import workflow_of

if TYPE_CHECKING:
    from ..runtime import HasRuntime


#: Rows before a page from which a search counts its matches first: a sharded queue's page N
#: merges every member's newest ``N * page_size`` jobs, so ``?page=1000000`` read them all
#: (up to 500 million rows per shard) to answer an empty page.
DEEP_PAGE_ROWS = 10_000


def job_dict(job: Job, *, full: bool = True) -> dict[str, Any]:
    """A job as a dict; ``full=False`` leaves out errors, history and result (list rows)."""
    out = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job)}
    out["state"] = str(job.state)
    if not full:
        for key in ("errors", "history", "result", "metadata", "kwargs", "args"):
            out.pop(key, None)
        out["args_preview"] = preview_args(job)
    return out


def preview_args(job: Job, limit: int = 120) -> str:
    """A short one-line rendering of a job's arguments."""
    parts = [repr(a) for a in job.args] + [f"{k}={v!r}" for k, v in job.kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def schedule_dict(schedule: Any) -> dict[str, Any]:
    """A stored schedule as a dict with ``name``, ``expr``, ``next_run``, ``paused``, ..."""
    if hasattr(schedule, "to_doc"):
        doc = dict(schedule.to_doc())
    elif dataclasses.is_dataclass(schedule) and not isinstance(schedule, type):
        doc = dataclasses.asdict(schedule)
    else:
        doc = dict(schedule)
    doc.setdefault("expr", getattr(schedule, "expr", doc.get("cron") or doc.get("every")))
    doc["next_run"] = doc.get("next_fire_at", doc.get("next_run"))
    doc["last_run"] = doc.get("last_fire_at", doc.get("last_run"))
    doc["paused"] = bool(doc.get("paused"))
    return doc


def list_schedules(runtime: Runtime) -> list[dict[str, Any]]:
    """Every stored schedule as dicts (empty when the scheduler package is unavailable)."""
    try:
        return [schedule_dict(s) for s in runtime.schedules.list()]
    except ImportError:
        return []


class Inspector:
    """Read-only views over one app (see the module docstring)."""

    def __init__(self, app: Runtime | HasRuntime) -> None:
        self.runtime = as_runtime(app)

    @property
    def broker(self) -> Broker:
        """The runtime's broker."""
        return self.runtime.broker

    # ------------------------------------------------------------------ queues and workers
    def queues(self, minutes: int = 5) -> list[dict[str, Any]]:
        """One row per queue: counts by state, paused, depth, oldest age, rates of ``minutes``."""
        flush_local(self.runtime)
        broker, now = self.runtime.broker, self.runtime.now()
        counts = broker.counts()
        paused = broker.paused_queues()
        window = read_counters(broker, now, minutes, by="queue")
        served: dict[str, int] = {}
        for worker in admin.workers(self.runtime):
            for q in worker_queues(worker):
                served[q] = served.get(q, 0) + 1
        rows = []
        for name in sorted(set(counts) | paused):
            c = {s.value: counts.get(name, {}).get(s.value, 0) for s in JobState}
            ready = broker.oldest_pending(name) if c["pending"] else None
            s = summarize(window.get(name, {}), minutes)
            rows.append(
                {
                    "name": name,
                    "counts": c,
                    "paused": name in paused,
                    "depth": c["pending"],
                    "oldest_pending_age": max(0.0, now - ready) if ready is not None else None,
                    "dead_letters": c["dead_letter"],
                    "workers": served.get(name, 0),
                    "throughput_per_minute": s.throughput_per_minute,
                    "failure_rate": s.failure_rate,
                    "processed": s.processed,
                    "failed": s.failed,
                    "window_minutes": minutes,
                }
            )
        return fold_rows(rows, self.runtime.shards)  # one row per sharded queue

    def queue(self, name: str, minutes: int = 60) -> dict[str, Any]:
        """One queue in detail: its row, metrics summary, per-task summaries, next jobs, series."""
        validate_queue_name(name)
        row = next((r for r in self.queues(minutes) if r["name"] == name), None)
        if row is None:
            raise ValidationError("queue", f"no queue named {name!r}")
        broker, now = self.runtime.broker, self.runtime.now()
        members = admin.queue_members(self.runtime, name)  # a sharded queue: all its shards
        tasks = merge_counters(
            read_counters(broker, now, minutes, queue=q, by="task") for q in members
        )
        return {
            **row,
            "summary": summarize(tasks_total(tasks), minutes).to_dict(),
            "tasks": {t: summarize(c, minutes).to_dict() for t, c in sorted(tasks.items())},
            "next": [job_dict(j, full=False) for q in members for j in broker.peek(q, 10)][:10],
            "series": merge_series([series(broker, now, minutes, queue=q) for q in members]),
        }

    def workers(self) -> list[dict[str, Any]]:
        """Live workers with ``queues``, ``running`` job ids and ``heartbeat_age`` seconds."""
        now = self.runtime.now()
        out = []
        for w in admin.workers(self.runtime):
            beat = _first_number(w, "heartbeat_at", "last_heartbeat", "seen_at", "updated_at")
            running = w.get("running") or w.get("running_jobs") or w.get("jobs") or []
            out.append(
                {
                    **w,
                    "queues": worker_queues(w),
                    "running": list(running),
                    "heartbeat_age": None if beat is None else max(0.0, now - beat),
                }
            )
        return out

    def overview(self, minutes: int = 5) -> dict[str, Any]:
        """Everything the front page shows: queues, workers, active alerts, totals."""
        queues = self.queues(minutes)
        totals = {s.value: sum(q["counts"][s.value] for q in queues) for s in JobState}
        return {
            "now": self.runtime.now(),
            "queues": queues,
            "workers": self.workers(),
            "alerts": self.alerts(include_resolved=False),
            "totals": totals,
            "flow": flow_waits(self.runtime),
        }

    # ------------------------------------------------------------------ jobs
    def search(
        self, filters: Mapping[str, Any] | None = None, *, page: int = 1, page_size: int = 50
    ) -> Page:
        """Jobs matching ``filters`` (``SEARCH_FIELDS``; empty values ignored), newest first."""
        clean = clean_filters(filters or {}, self.runtime.now())
        if isinstance(page, bool) or not isinstance(page, int) or not 1 <= page <= MAX_PAGE:
            raise ValidationError("page", f"must be an integer 1..{MAX_PAGE}")
        if (
            isinstance(page_size, bool)
            or not isinstance(page_size, int)
            or not 1 <= page_size <= 500
        ):
            raise ValidationError("page_size", "must be an integer 1..500")
        skipped = (page - 1) * page_size
        if skipped >= DEEP_PAGE_ROWS:  # count first: a page past the end reads no job
            total = admin.search(self.runtime, **clean, page=1, page_size=1).total
            if skipped >= total:
                return Page([], total, page, page_size)
        return admin.search(self.runtime, **clean, page=page, page_size=page_size)

    def job(self, job_id: str) -> dict[str, Any]:
        """A job with everything known: args, result, errors (tracebacks) and a timeline."""
        job = self.runtime.broker.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        out = job_dict(job)
        now = self.runtime.now()
        out = {
            **out,
            "workflow_id": workflow_of(out),
            "timeline": timeline(job, [e.to_dict() for e in job_events(self.broker, job_id)]),
            "progress": jobdocs.read_progress(self.broker, job_id, now),  # current_job().progress()
            "cancel_requested": job.state is JobState.ACTIVE
            and bool(jobdocs.cancel_requested(self.broker, {job_id}, now)),
        }
        if job.flow is not None and job.state is JobState.PENDING:  # issue 15: why it waits
            status = self.runtime.broker.flow_status(now)
            out["waiting_for"] = why_waiting(status, job)
        return out

    def dead_letters(
        self, filters: Mapping[str, Any] | None = None, *, page: int = 1, page_size: int = 50
    ) -> Page:
        """Dead-lettered jobs matching ``filters``, newest first."""
        return self.search(
            {**(filters or {}), "state": "dead_letter"}, page=page, page_size=page_size
        )

    def matching_ids(self, filters: Mapping[str, Any], limit: int = 10_000) -> list[str]:
        """Ids of every job matching ``filters`` (up to ``limit``), for bulk actions; a sharded
        queue's name is searched one member at a time (``admin.queue_members``: a merged
        search would re-read every member's earlier pages for each page)."""
        clean = clean_filters(filters, self.runtime.now())
        queue = clean.get("queue")
        members = admin.queue_members(self.runtime, queue) if queue is not None else [None]
        ids: list[str] = []
        for member in members:
            page = 1
            while len(ids) < limit:
                found = {**clean, "queue": member}
                result = admin.search(self.runtime, **found, page=page, page_size=500, whole=False)
                ids.extend(j.id for j in result.items)
                if page >= result.pages or not result.items:
                    break
                page += 1
        return list(dict.fromkeys(ids))[:limit]

    # ------------------------------------------------------------------ schedules, alerts, events
    def schedules(self, history: int = 10, next_runs: int = 3) -> list[dict[str, Any]]:
        """Every schedule with its next runs and newest history entries."""
        out = []
        for doc in list_schedules(self.runtime):
            out.append(
                {
                    **doc,
                    "next_runs": self._next_runs(doc["name"], next_runs),
                    "history": self._history(doc["name"], history),
                }
            )
        return out

    def _next_runs(self, name: str, n: int) -> list[float]:
        try:
            return [float(t) for t in self.runtime.schedules.next_runs(name, n)]
        except Exception:  # a schedule removed meanwhile, or no registry support
            return []

    def _history(self, name: str, n: int) -> list[dict[str, Any]]:
        try:
            return list(self.runtime.schedules.history(name, n))
        except Exception:
            return []

    def alerts(self, include_resolved: bool = True) -> list[dict[str, Any]]:
        """Alert states (active first) as dicts."""
        alerts = self.runtime.alerts  # None: a runtime without an alert manager
        return [s.to_dict() for s in alerts.states(include_resolved)] if alerts else []

    def alert_rules(self) -> list[dict[str, Any]]:
        """The configured rules of this process."""
        alerts = self.runtime.alerts
        return [
            {"name": r.name, "type": r.type, "severity": r.severity, "description": r.describe()}
            for r in (alerts.rules if alerts is not None else [])
        ]

    def metrics(
        self, queue: str | None = None, task: str | None = None, minutes: int = 60
    ) -> dict[str, Any]:
        """Summary and per-minute series over the last ``minutes`` (1..1440)."""
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise ValidationError("minutes", "must be an integer 1..1440")
        if queue is not None:
            validate_queue_name(queue)
        if task is not None:
            validate_task_name(task)
        flush_local(self.runtime)
        broker, now = self.runtime.broker, self.runtime.now()
        counters = read_counters(broker, now, minutes, queue=queue, task=task).get("", {})
        return {
            "queue": queue,
            "task": task,
            "summary": summarize(counters, minutes).to_dict(),
            "series": series(broker, now, minutes, queue=queue, task=task),
        }

    def events(
        self, after: str | None = None, limit: int = 100
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Events after cursor ``after`` and the cursor to resume from."""
        reader = EventReader(self.runtime.broker, check_cursor(after, "after"))
        try:
            events = reader.read(max(1, min(limit, 1000)))
        except (ValueError, OverflowError) as exc:  # a cursor of another backend's shape
            raise ValidationError("after", "is not a cursor of this broker's event stream") from exc
        return [e.to_dict() for e in events], reader.cursor

    def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """Operator actions, newest first."""
        from .actions import AUDIT_LOG

        return self.runtime.broker.logs.read(AUDIT_LOG, max(1, min(limit, 1000)))


def tasks_total(tasks: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Sum per-task counters into one."""
    total: dict[str, float] = {}
    for values in tasks.values():
        for key, amount in values.items():
            total[key] = total.get(key, 0.0) + amount
    return total


def timeline(job: Job, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's life, oldest first: stream events when complete, else rebuilt from the record."""
    if events and events[0].get("type") == "enqueued":
        out = [
            {"at": e.get("at"), "event": e.get("type"), "detail": _event_detail(e)} for e in events
        ]
        # operator notes with no event of their own (an early "run_now") join from the record
        notes = [h for h in job.history if h.get("event") == "run_now"]
        out += [{"at": h.get("at"), "event": "run_now", "detail": h.get("note", "")} for h in notes]
        return sorted(out, key=lambda e: _num(e["at"])) if notes else out
    entries = [{"at": job.created_at, "event": "enqueued", "detail": f"queue {job.queue}"}]
    entries += [
        {
            "at": e.get("at"),
            "event": "failed",
            "detail": f"attempt {e.get('attempt')}: {e.get('kind')} {e.get('type') or ''} "
            f"{e.get('message') or ''}".strip(),
        }
        for e in job.errors
    ]
    entries += [
        {"at": h.get("at"), "event": h.get("event"), "detail": h.get("note") or ""}
        for h in job.history
    ]
    if job.started_at is not None:
        entries.append(
            {"at": job.started_at, "event": "started", "detail": f"attempt {job.attempts}"}
        )
    if job.finished_at is not None:
        entries.append({"at": job.finished_at, "event": str(job.state), "detail": ""})
    known = {(e["event"], round(_num(e["at"]), 3)) for e in entries}
    for e in events:
        if (e.get("type"), round(_num(e.get("at")), 3)) not in known:
            entries.append({"at": e.get("at"), "event": e.get("type"), "detail": _event_detail(e)})
    return sorted(entries, key=lambda e: _num(e["at"]))


def _event_detail(event: Mapping[str, Any]) -> str:
    skip = {"type", "at", "cursor", "job_id", "queue", "task"}
    parts = []
    for key, value in event.items():
        if key in skip or value in (None, ""):
            continue
        if key.endswith(("_at", "run_at")) and isinstance(value, int | float):
            value = _utc(value)
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def _utc(ts: float) -> str:
    """Epoch seconds as UTC wall time; a time past year 9999 (``Retry(delay=1e300)``) or NaN
    is shown as the number, never an error that takes the job's page down."""
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):
        return f"{ts!r} (out of range)"


def _first_number(doc: Mapping[str, Any], *keys: str) -> float | None:
    for key in keys:
        value = doc.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
