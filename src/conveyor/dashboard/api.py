"""The HTTP JSON API (``/api/v1``): the dashboard's reads and actions plus enqueue by task name.

Same authentication as the pages (``Authorization: Bearer <token>`` for scripts), rate-limited
per client, CSRF-checked for cookie sessions. ``OPERATIONS`` is the single table the routes
and the OpenAPI document (``/api/v1/openapi.json``) are both built from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import ValidationError
from ..monitoring.actions import ENQUEUE_OPTIONS
from ..monitoring.filters import SEARCH_FIELDS
from ..monitoring.inspect import job_dict
from .api_ops import (
    get_history,
    post_bulk,
    post_queue_clear,
    post_run_now,
    post_worker_quiet,
    post_worker_stop,
)
from .security import csrf_token
from .server import action, dashboard_of, int_param

PREFIX = "/api/v1"


def json_response(data: Any, status: int = 200) -> Response:
    """JSON via orjson; non-JSON values (datetimes, bytes, ...) become strings."""
    try:
        body = orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:  # nested past orjson's limit by our own envelope: a job's
        body = json.dumps(data, default=str, ensure_ascii=False).encode()  # deepest result
    return Response(
        body,
        status_code=status,
        media_type="application/json",
        headers={"cache-control": "no-store"},
    )


def _filters(source: Any, skip_state: bool = False) -> dict[str, Any]:
    return {
        k: source.get(k)
        for k in SEARCH_FIELDS
        if source.get(k) not in (None, "") and not (skip_state and k == "state")
    }


def _page(result: Any) -> dict[str, Any]:
    return {
        "items": [job_dict(j, full=False) for j in result.items],
        "total": result.total,
        "page": result.page,
        "pages": result.pages,
        "page_size": result.page_size,
    }


# ---------------------------------------------------------------------- reads
def get_overview(request: Request, data: dict[str, Any]) -> Any:
    """Queues, workers, active alerts and totals."""
    return dashboard_of(request).inspector.overview(int_param(request, "minutes", 5, 1, 1440))


def get_queues(request: Request, data: dict[str, Any]) -> Any:
    """Every queue with counts, depth, oldest age and rates."""
    minutes = int_param(request, "minutes", 5, 1, 1440)
    return {"queues": dashboard_of(request).inspector.queues(minutes)}


def get_queue(request: Request, data: dict[str, Any]) -> Any:
    """One queue with metrics, per-task summaries and the next jobs."""
    minutes = int_param(request, "minutes", 60, 1, 1440)
    return dashboard_of(request).inspector.queue(request.path_params["name"], minutes)


def get_workers(request: Request, data: dict[str, Any]) -> Any:
    """Live workers."""
    return {"workers": dashboard_of(request).inspector.workers()}


def get_jobs(request: Request, data: dict[str, Any]) -> Any:
    """Search jobs (filters as query parameters), newest first."""
    page = int_param(request, "page", 1, 1, 1_000_000)
    size = int_param(request, "page_size", 50, 1, 500)
    result = dashboard_of(request).inspector.search(
        _filters(request.query_params), page=page, page_size=size
    )
    return _page(result)


def get_job(request: Request, data: dict[str, Any]) -> Any:
    """One job with errors, history and timeline."""
    return dashboard_of(request).inspector.job(request.path_params["id"])


def get_dead(request: Request, data: dict[str, Any]) -> Any:
    """Dead letters (filters as query parameters), newest first."""
    page = int_param(request, "page", 1, 1, 1_000_000)
    size = int_param(request, "page_size", 50, 1, 500)
    filters = _filters(request.query_params, skip_state=True)
    return _page(dashboard_of(request).inspector.dead_letters(filters, page=page, page_size=size))


def get_schedules(request: Request, data: dict[str, Any]) -> Any:
    """Schedules with next runs and history."""
    return {"schedules": dashboard_of(request).inspector.schedules()}


def get_alerts(request: Request, data: dict[str, Any]) -> Any:
    """Alert states and configured rules."""
    ins = dashboard_of(request).inspector
    return {"alerts": ins.alerts(), "rules": ins.alert_rules()}


def get_metrics(request: Request, data: dict[str, Any]) -> Any:
    """Throughput, failure rate and percentiles over the last ``minutes``."""
    q = request.query_params
    return dashboard_of(request).inspector.metrics(
        q.get("queue") or None, q.get("task") or None, int_param(request, "minutes", 60, 1, 1440)
    )


def get_events(request: Request, data: dict[str, Any]) -> Any:
    """Events after ``after`` (a cursor) and the cursor to pass next time."""
    events, cursor = dashboard_of(request).inspector.events(
        request.query_params.get("after") or None, int_param(request, "limit", 100, 1, 1000)
    )
    return {"events": events, "cursor": cursor}


def get_audit(request: Request, data: dict[str, Any]) -> Any:
    """Operator actions, newest first."""
    limit = int_param(request, "limit", 100, 1, 1000)
    return {"entries": dashboard_of(request).inspector.audit_log(limit)}


def get_csrf(request: Request, data: dict[str, Any]) -> Any:
    """A CSRF token for cookie-based clients (the cookie is set on this response)."""
    dash = dashboard_of(request)
    return {"csrf_token": csrf_token(dash.config, request.scope.get("conveyor.csrf_seed", ""))}


def get_openapi(request: Request, data: dict[str, Any]) -> Any:
    """This API's OpenAPI 3.1 document."""
    from .hardening import root_of
    from .openapi import document

    return document(OPERATIONS, root_of(request.scope) + PREFIX)  # paths under a mount prefix


# ---------------------------------------------------------------------- actions
def _result(ok: bool, refused: str) -> Response:
    return json_response(
        {"ok": True} if ok else {"ok": False, "error": refused}, 200 if ok else 409
    )


def post_enqueue(request: Request, data: dict[str, Any]) -> Any:
    """Enqueue a job by task name."""
    unknown = set(data) - {"task", "args", "kwargs", *ENQUEUE_OPTIONS}
    if unknown:
        raise ValidationError(sorted(unknown)[0], "unknown field")
    task = data.get("task")
    if not isinstance(task, str) or not task:
        raise ValidationError("task", "is required: the name of a registered task")
    options = {k: data[k] for k in ENQUEUE_OPTIONS if data.get(k) is not None}
    handle = (
        dashboard_of(request)
        .operator(request)
        .enqueue(task, data.get("args"), data.get("kwargs"), **options)
    )
    return json_response(
        {
            "id": handle.id,
            "task": handle.task,
            "queue": handle.queue,
            "state": str(handle.state),
            "duplicate": handle.duplicate,
        },
        200 if handle.duplicate else 201,
    )


def post_cancel(request: Request, data: dict[str, Any]) -> Any:
    """Cancel a job (a running one: its worker is asked to stop it)."""
    ok = dashboard_of(request).operator(request).cancel(request.path_params["id"])
    return _result(ok, "the job is finished")


def post_retry(request: Request, data: dict[str, Any]) -> Any:
    """Requeue a dead-lettered or cancelled job."""
    ok = dashboard_of(request).operator(request).retry(request.path_params["id"])
    return _result(ok, "only dead-lettered or cancelled jobs can be retried")


def delete_job(request: Request, data: dict[str, Any]) -> Any:
    """Delete a finished job."""
    ok = dashboard_of(request).operator(request).delete(request.path_params["id"])
    return _result(ok, "only finished jobs can be deleted")


def post_pause(request: Request, data: dict[str, Any]) -> Any:
    """Pause a queue."""
    dashboard_of(request).operator(request).pause_queue(request.path_params["name"])
    return {"ok": True}


def post_resume(request: Request, data: dict[str, Any]) -> Any:
    """Resume a queue."""
    dashboard_of(request).operator(request).resume_queue(request.path_params["name"])
    return {"ok": True}


def _dead_filters(data: dict[str, Any]) -> dict[str, Any]:
    """The body of a dead-letter bulk action; an unknown field is refused, because a misspelt
    filter would otherwise act on every dead letter."""
    unknown = set(data) - (set(SEARCH_FIELDS) - {"state"})
    if unknown:
        raise ValidationError(sorted(unknown)[0], "unknown field; the body takes only filters")
    return _filters(data, True)


def post_dead_retry(request: Request, data: dict[str, Any]) -> Any:
    """Requeue every dead letter matching the filters in the body."""
    return {"count": dashboard_of(request).operator(request).retry_dead(_dead_filters(data))}


def post_dead_delete(request: Request, data: dict[str, Any]) -> Any:
    """Delete every dead letter matching the filters in the body."""
    return {"count": dashboard_of(request).operator(request).delete_dead(_dead_filters(data))}


def post_schedule_pause(request: Request, data: dict[str, Any]) -> Any:
    """Pause a schedule."""
    dashboard_of(request).operator(request).pause_schedule(request.path_params["name"])
    return {"ok": True}


def post_schedule_resume(request: Request, data: dict[str, Any]) -> Any:
    """Resume a schedule."""
    dashboard_of(request).operator(request).resume_schedule(request.path_params["name"])
    return {"ok": True}


def post_ack(request: Request, data: dict[str, Any]) -> Any:
    """Acknowledge a firing alert."""
    ok = dashboard_of(request).operator(request).acknowledge(request.path_params["key"])
    return _result(ok, "the alert is not firing")


@dataclass(frozen=True)
class Operation:
    """One API endpoint: method, path (OpenAPI style), handler, and what the docs say."""

    method: str
    path: str
    handler: Callable[[Request, dict[str, Any]], Any]
    tag: str
    query: tuple[str, ...] = ()
    body: str | None = None  # name of a schema in openapi.SCHEMAS
    conflict: bool = False  # may answer 409: the action does not apply to the current state

    @property
    def write(self) -> bool:
        """True for state-changing methods."""
        return self.method != "GET"


_F = ("id", "state", "task", "queue", "since", "until", "error", "text", "page", "page_size")
OPERATIONS: tuple[Operation, ...] = (
    Operation("GET", "/overview", get_overview, "queues", ("minutes",)),
    Operation("GET", "/queues", get_queues, "queues", ("minutes",)),
    Operation("GET", "/queues/{name}", get_queue, "queues", ("minutes",)),
    Operation("POST", "/queues/{name}/pause", post_pause, "queues"),
    Operation("POST", "/queues/{name}/resume", post_resume, "queues"),
    Operation("POST", "/queues/{name}/clear", post_queue_clear, "queues"),
    Operation("GET", "/history", get_history, "metrics", ("range", "queue")),
    Operation("GET", "/workers", get_workers, "workers"),
    Operation("POST", "/workers/{id}/quiet", post_worker_quiet, "workers", body="WorkerCommand"),
    Operation("POST", "/workers/{id}/stop", post_worker_stop, "workers", body="WorkerCommand"),
    Operation("GET", "/jobs", get_jobs, "jobs", _F),
    Operation("POST", "/jobs", post_enqueue, "jobs", body="Enqueue"),
    Operation("POST", "/jobs/bulk", post_bulk, "jobs", body="Bulk"),
    Operation("GET", "/jobs/{id}", get_job, "jobs"),
    Operation("DELETE", "/jobs/{id}", delete_job, "jobs", conflict=True),
    Operation("POST", "/jobs/{id}/cancel", post_cancel, "jobs", conflict=True),
    Operation("POST", "/jobs/{id}/retry", post_retry, "jobs", conflict=True),
    Operation("POST", "/jobs/{id}/run-now", post_run_now, "jobs", conflict=True),
    Operation(
        "GET", "/dead-letters", get_dead, "dead letters", tuple(f for f in _F if f != "state")
    ),
    Operation("POST", "/dead-letters/retry", post_dead_retry, "dead letters", body="Filters"),
    Operation("POST", "/dead-letters/delete", post_dead_delete, "dead letters", body="Filters"),
    Operation("GET", "/schedules", get_schedules, "schedules"),
    Operation("POST", "/schedules/{name}/pause", post_schedule_pause, "schedules"),
    Operation("POST", "/schedules/{name}/resume", post_schedule_resume, "schedules"),
    Operation("GET", "/alerts", get_alerts, "alerts"),
    Operation("POST", "/alerts/{key}/acknowledge", post_ack, "alerts", conflict=True),
    Operation("GET", "/metrics", get_metrics, "metrics", ("queue", "task", "minutes")),
    Operation("GET", "/events", get_events, "events", ("after", "limit")),
    Operation("GET", "/audit", get_audit, "audit", ("limit",)),
    Operation("GET", "/csrf", get_csrf, "auth"),
    Operation("GET", "/openapi.json", get_openapi, "meta"),
)


def _reader(
    handler: Callable[[Request, dict[str, Any]], Any],
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        result = await run_in_threadpool(handler, request, {})
        return result if isinstance(result, Response) else json_response(result)

    return endpoint


def _writer(
    handler: Callable[[Request, dict[str, Any]], Any],
) -> Callable[[Request, dict[str, Any]], Response]:
    def run(request: Request, data: dict[str, Any]) -> Response:
        result = handler(request, data)
        return result if isinstance(result, Response) else json_response(result)

    run.__name__ = handler.__name__
    return run


def routes() -> list[Route]:
    """Starlette routes for every operation; each parameter is ONE path segment, quoted
    (ids may contain ``/`` and ``..``: ``%2F`` stays inside the segment)."""
    out = []
    for op in OPERATIONS:
        path = PREFIX + re.sub(r"{(\w+)}", r"{\1:segment}", op.path)
        endpoint = action(_writer(op.handler)) if op.write else _reader(op.handler)
        out.append(Route(path, endpoint, methods=[op.method]))
    return out
