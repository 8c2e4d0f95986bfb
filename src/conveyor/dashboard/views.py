"""HTML pages (GET): overview, queue, job search, job detail, dead letters, schedules, alerts,
audit log, login, and Prometheus ``/metrics``. Every read goes through ``monitoring.inspect``."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..broker.base import Page
from ..core.state import JobState
from ..monitoring.filters import SEARCH_FIELDS
from ..monitoring.prometheus import exposition
from .bulk import actions_for
from .redirects import at_root, safe_target
from .server import dashboard_of, identity_of, int_param

PAGE_SIZE = 50


def filters_of(request: Request, *, dead: bool = False) -> dict[str, str]:
    """The search filters present in the query string (empty ones dropped)."""
    out = {}
    for key in SEARCH_FIELDS:
        if dead and key == "state":
            continue
        value = request.query_params.get(key, "").strip()
        if value:
            out[key] = value
    return out


def pager(request: Request, page: Page, filters: dict[str, str]) -> dict[str, Any]:
    """Links for previous/next pages that keep the filters."""

    def link(n: int) -> str:
        return request.url.path + "?" + urlencode({**filters, "page": n})

    return {
        "page": page.page,
        "pages": page.pages,
        "total": page.total,
        "prev": link(page.page - 1) if page.page > 1 else None,
        "next": link(page.page + 1) if page.page < page.pages else None,
    }


def overview(request: Request) -> Response:
    """Queues, workers and active alerts, kept live over SSE."""
    dash = dashboard_of(request)
    return dash.page(request, "overview.html", data=dash.inspector.overview(), nav="overview")


def queue(request: Request) -> Response:
    """One queue: counts, metrics, per-task numbers and the next jobs."""
    dash = dashboard_of(request)
    name = request.path_params["name"]
    minutes = int_param(request, "minutes", 60, 1, 1440)
    return dash.page(request, "queue.html", q=dash.inspector.queue(name, minutes), nav="overview")


def jobs(request: Request) -> Response:
    """Job search with filters and pagination."""
    dash = dashboard_of(request)
    filters = filters_of(request)
    page_no = int_param(request, "page", 1, 1, 1_000_000)
    result = dash.inspector.search(filters, page=page_no, page_size=PAGE_SIZE)
    return dash.page(
        request,
        "jobs.html",
        result=result,
        filters=filters,
        nav="jobs",
        pager=pager(request, result, filters),
        states=[s.value for s in JobState],
        queues=dash.app.broker.queues(),
        bulk_actions=actions_for("jobs"),
        bulk_filters=filters,
    )


def job(request: Request) -> Response:
    """One job: arguments, result, error history with tracebacks, timeline; live state."""
    dash = dashboard_of(request)
    detail = dash.inspector.job(request.path_params["id"])
    progress = detail.get("progress")
    return dash.page(request, "job.html", job=detail, progress=progress, nav="jobs")


def dead(request: Request) -> Response:
    """Dead letters with retry, delete and bulk actions by filter."""
    dash = dashboard_of(request)
    filters = filters_of(request, dead=True)
    page_no = int_param(request, "page", 1, 1, 1_000_000)
    result = dash.inspector.dead_letters(filters, page=page_no, page_size=PAGE_SIZE)
    return dash.page(
        request,
        "dead.html",
        result=result,
        filters=filters,
        nav="dead",
        pager=pager(request, result, filters),
        queues=dash.app.broker.queues(),
        bulk_actions=actions_for("dead"),
        bulk_filters={**filters, "state": "dead_letter"},
    )


def schedules(request: Request) -> Response:
    """Schedules with next runs, history, pause/resume."""
    dash = dashboard_of(request)
    return dash.page(
        request, "schedules.html", schedules=dash.inspector.schedules(), nav="schedules"
    )


def alerts(request: Request) -> Response:
    """Alert states and rules, with acknowledge."""
    dash = dashboard_of(request)
    return dash.page(
        request,
        "alerts.html",
        alerts=dash.inspector.alerts(),
        rules=dash.inspector.alert_rules(),
        nav="alerts",
    )


def audit(request: Request) -> Response:
    """The audit log of operator actions."""
    dash = dashboard_of(request)
    limit = int_param(request, "limit", 200, 1, 1000)
    return dash.page(request, "audit.html", entries=dash.inspector.audit_log(limit), nav="audit")


def login_page(request: Request) -> Response:
    """The login form (token or username/password)."""
    dash = dashboard_of(request)
    if not dash.config.auth_enabled or identity_of(request).via in ("cookie", "header"):
        return Response(status_code=303, headers={"location": at_root(request, "/")})
    return dash.page(
        request,
        "login.html",
        next=safe_next(request, request.query_params.get("next")),
        has_password=bool(dash.config.password),
        has_token=bool(dash.config.token),
        error="",
    )


def metrics(request: Request) -> Response:
    """Prometheus text exposition for the whole system."""
    body, content_type = exposition(dashboard_of(request).app)
    return Response(body, media_type=content_type)


def safe_next(request: Request, target: str | None) -> str:
    """A path inside this dashboard to go to after login (never another host or app)."""
    return safe_target(request, target) or at_root(request, "/")


def routes() -> list[Route]:
    """The GET routes of the HTML pages."""
    return [
        Route("/", overview),
        Route("/queues/{name:segment}", queue),
        Route("/jobs", jobs),
        Route("/jobs/{id:segment}", job),
        Route("/dead", dead),
        Route("/schedules", schedules),
        Route("/alerts", alerts),
        Route("/audit", audit),
        Route("/login", login_page),
        Route("/metrics", metrics),
    ]
