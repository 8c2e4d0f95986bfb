"""The workers, queues and history pages and their actions.

GET ``/workers`` (each worker process, its running jobs, quiet / stop), ``/queues`` (depth,
latency, rates, paused, limits; pause / resume / clear), ``/queues/{name}/clear`` (the
confirmation step, showing what would be deleted), ``/history`` (processed / failed over
1 h / 24 h / 7 d) and the fragments htmx polls (``/fragments/workers``, ``/fragments/queues``,
``/fragments/history``: not under ``/queues/``, where they could shadow a queue's name).
POST ``/workers/{id}/quiet``, ``/workers/{id}/stop`` and ``/queues/{name}/clear`` go through
``server.action`` (read-only refusal, CSRF) and are audited (``monitoring/ops.py``).
Internal URLs carry the mount prefix (``root_path``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ..errors import ValidationError
from ..monitoring import ops
from ..monitoring.history import RANGES
from .hardening import root_of
from .redirects import at_root, back, done
from .server import action, dashboard_of

FRAGMENT_HEADERS = {"cache-control": "no-store"}


def root(request: Request) -> str:
    """The mount prefix of the dashboard ('' when served at the root)."""
    return root_of(request.scope)


def fragment(request: Request, template: str, **context: Any) -> HTMLResponse:
    """A template rendered alone (an htmx swap), with the common context."""
    dash = dashboard_of(request)
    html = dash.renderer.render(template, **dash.context(request), **context)
    return HTMLResponse(html, headers=FRAGMENT_HEADERS)


# ---------------------------------------------------------------------- workers
def workers(request: Request) -> Response:
    """Every live worker process with its running jobs and quiet / stop controls."""
    dash = dashboard_of(request)
    rows = ops.worker_rows(dash.inspector)
    return dash.page(request, "workers.html", workers=rows, nav="workers")


def workers_table(request: Request) -> Response:
    """The workers table alone (polled by the workers page)."""
    return fragment(
        request, "_workers_ops.html", workers=ops.worker_rows(dashboard_of(request).inspector)
    )


def _whom(data: dict[str, Any], worker_id: str) -> tuple[str, str]:
    """(scope, who) of a quiet / stop form: the whole ``conveyor worker`` unless
    ``scope=process``."""
    scope = str(data.get("scope") or "group")
    return scope, f"Worker {worker_id}" + (" (this process only)" if scope == "process" else "")


def quiet_worker(request: Request, data: dict[str, Any]) -> Response:
    """Ask a worker (all its processes, or ``scope=process``: one) to stop claiming."""
    worker_id = request.path_params["id"]
    scope, who = _whom(data, worker_id)
    ops.quiet_worker(dashboard_of(request).operator(request), worker_id, scope)
    return done(
        request,
        back(request, data, "/workers"),
        f"{who} asked to go quiet (within one heartbeat).",
    )


def stop_worker(request: Request, data: dict[str, Any]) -> Response:
    """Ask a worker (all its processes, or ``scope=process``: one) to shut down gracefully."""
    worker_id = request.path_params["id"]
    scope, who = _whom(data, worker_id)
    ops.stop_worker(dashboard_of(request).operator(request), worker_id, scope)
    return done(
        request,
        back(request, data, "/workers"),
        f"{who} asked to stop (it drains its running jobs, then exits).",
    )


# ---------------------------------------------------------------------- queues
def queues(request: Request) -> Response:
    """Every queue: depth by state, latency, rates, paused, limits and actions."""
    dash = dashboard_of(request)
    rows = ops.queue_rows(dash.inspector)
    return dash.page(request, "queues.html", queues=rows, nav="queues", window=5)


def queues_table(request: Request) -> Response:
    """The queues table alone (polled by the queues page)."""
    rows = ops.queue_rows(dashboard_of(request).inspector)
    return fragment(request, "_queues_ops.html", queues=rows, window=5)


def clear_confirm(request: Request) -> Response:
    """The confirmation step of clearing a queue: how many jobs would be deleted."""
    dash = dashboard_of(request)
    row = ops.clear_preview(dash.inspector, request.path_params["name"])
    return dash.page(request, "queue_clear.html", q=row, nav="queues")


def clear_queue(request: Request, data: dict[str, Any]) -> Response:
    """Delete the queue's pending, scheduled and retrying jobs (after the confirmation)."""
    name = request.path_params["name"]
    if data.get("confirm") != "clear":
        raise ValidationError("confirm", "must be 'clear' (use the confirmation page)")
    n = ops.clear_queue(dashboard_of(request).operator(request), name)
    return done(request, at_root(request, "/queues"), f"Queue {name} cleared: {n} jobs deleted.")


# ---------------------------------------------------------------------- history
def _history_args(request: Request) -> tuple[str, str | None]:
    range_name = request.query_params.get("range", "1h") or "1h"
    if range_name not in RANGES:
        raise ValidationError("range", f"must be one of {', '.join(RANGES)}")
    queue = request.query_params.get("queue", "").strip() or None
    return range_name, queue


def history(request: Request) -> Response:
    """Processed and failed jobs over 1 h / 24 h / 7 d, all queues or one."""
    dash = dashboard_of(request)
    range_name, queue = _history_args(request)
    data = ops.history(dash.inspector, range_name, queue)
    return dash.page(
        request,
        "history.html",
        h=data,
        ranges=list(RANGES),
        queue=queue,
        queues=dash.app.broker.queues(),
        nav="history",
    )


def history_chart(request: Request) -> Response:
    """One chart alone (the overview loads the last hour with htmx)."""
    range_name, queue = _history_args(request)
    data = ops.history(dashboard_of(request).inspector, range_name, queue)
    return fragment(request, "_history_chart.html", h=data)


def routes() -> list[Route]:
    """The routes of this module (GET pages and fragments, POST actions)."""
    post = ["POST"]
    return [
        Route("/workers", workers),
        Route("/fragments/workers", workers_table),
        Route("/workers/{id:segment}/quiet", action(quiet_worker), methods=post),
        Route("/workers/{id:segment}/stop", action(stop_worker), methods=post),
        Route("/queues", queues),
        Route("/fragments/queues", queues_table),
        Route("/queues/{name:segment}/clear", clear_confirm),
        Route("/queues/{name:segment}/clear", action(clear_queue), methods=post),
        Route("/history", history),
        Route("/fragments/history", history_chart),
    ]
