"""Handlers of the JSON API's operator actions that the pages had first: quiet / stop a
worker, clear a queue, the processed / failed history, run a job now and bulk actions.

They sit beside ``api.py`` (which lists them in ``OPERATIONS``, so routing, authentication,
CSRF, the read-only refusal and the OpenAPI document are the same as every other endpoint) and
call the same audited ``monitoring`` functions as the pages. Each returns a JSON-able dict (a
refused run-now: 409, as cancel / retry); bad input raises ``ValidationError`` (422 naming the
field).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import ValidationError
from ..monitoring import ops
from ..monitoring.actions import BULK_ACTIONS
from ..monitoring.filters import SEARCH_FIELDS
from .server import dashboard_of


def _scope(data: dict[str, Any]) -> str:
    unknown = set(data) - {"scope"}
    if unknown:  # a misspelt "scope" must not widen a one-process stop to the whole group
        raise ValidationError(sorted(unknown)[0], "unknown field; the body takes only scope")
    scope = data.get("scope", "group")
    if scope not in ops.SCOPES:
        raise ValidationError("scope", f"must be one of {', '.join(ops.SCOPES)}")
    return str(scope)


def post_worker_quiet(request: Request, data: dict[str, Any]) -> Any:
    """Ask a worker to stop claiming (all processes of its conveyor worker unless scope=process)."""
    worker_id = request.path_params["id"]
    command = ops.quiet_worker(dashboard_of(request).operator(request), worker_id, _scope(data))
    return {"ok": True, "worker": worker_id, "command": command}


def post_worker_stop(request: Request, data: dict[str, Any]) -> Any:
    """Ask a worker to drain and exit (all processes of its conveyor worker unless
    scope=process)."""
    worker_id = request.path_params["id"]
    command = ops.stop_worker(dashboard_of(request).operator(request), worker_id, _scope(data))
    return {"ok": True, "worker": worker_id, "command": command}


def post_queue_clear(request: Request, data: dict[str, Any]) -> Any:
    """Delete the waiting (pending, scheduled, retrying) jobs of a queue; running ones stay."""
    name = request.path_params["name"]
    deleted = ops.clear_queue(dashboard_of(request).operator(request), name)
    return {"ok": True, "queue": name, "deleted": deleted}


def get_history(request: Request, data: dict[str, Any]) -> Any:
    """Processed and failed jobs per minute or hour over a range, optionally of one queue."""
    range_name = request.query_params.get("range") or "1h"
    queue = request.query_params.get("queue") or None
    return ops.history(dashboard_of(request).inspector, range_name, queue)


def post_run_now(request: Request, data: dict[str, Any]) -> Any:
    """Make a scheduled or retrying job due now (attempts and errors kept)."""
    if not dashboard_of(request).operator(request).run_now(request.path_params["id"]):
        refused = {"ok": False, "error": "only a scheduled or retrying job can be run now"}
        return JSONResponse(refused, status_code=409, headers={"cache-control": "no-store"})
    return {"ok": True}


def post_bulk(request: Request, data: dict[str, Any]) -> Any:
    """Apply retry / cancel / run_now / delete to listed ids or to every job a search finds
    (at most 10,000 per call; one audit entry)."""
    unknown = set(data) - {"action", "ids", "filters"}
    if unknown:
        raise ValidationError(sorted(unknown)[0], "unknown field")
    name = data.get("action")
    if name not in BULK_ACTIONS:
        raise ValidationError("action", f"must be one of {', '.join(BULK_ACTIONS)}")
    ids, filters = data.get("ids"), data.get("filters")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        raise ValidationError("ids", "must be a list of job ids")
    if filters is not None and (not isinstance(filters, dict) or set(filters) - set(SEARCH_FIELDS)):
        raise ValidationError("filters", f"must be an object of {', '.join(SEARCH_FIELDS)}")
    if filters is not None and not any(v not in (None, "") for v in filters.values()):
        # as the CLI: an empty search would act on every job (up to the cap)
        raise ValidationError("filters", "give at least one filter (or list the ids)")
    result = dashboard_of(request).operator(request).bulk(str(name), ids=ids, filters=filters)
    return {
        "action": result.action,
        "matched": result.matched,
        "done": result.done,
        "truncated": result.truncated,
    }
