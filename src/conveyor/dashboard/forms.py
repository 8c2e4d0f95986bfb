"""HTML actions (POST): login/logout, pause/resume queues and schedules, cancel/retry/run
now/delete jobs, bulk retry/delete of dead letters by filter, acknowledge alerts (bulk actions on
selected jobs or search results: ``bulk``).

Each is wrapped by ``server.action`` (read-only refusal + CSRF check) and audited through
``monitoring.actions.Operator``. Responses return to where the operator was (``server.back``:
the form's ``next``, else the page the request came from, same origin only), with
``HX-Redirect`` for htmx.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..monitoring.actions import Operator
from ..monitoring.filters import SEARCH_FIELDS
from .hardening import cookie_path, segment
from .redirects import at_root, back, done
from .security import SESSION_COOKIE, actor_name, check_login
from .server import action, client_of, dashboard_of
from .views import safe_next


def login(request: Request, data: dict[str, Any]) -> Response:
    """Check the form's credentials; set the session cookie and go on, or show the form again."""
    dash = dashboard_of(request)
    config = dash.config
    target = safe_next(request, data.get("next"))
    user = check_login(
        config,
        str(data.get("username", "")),
        str(data.get("password", "")),
        str(data.get("token", "")),
    )
    if user is None:
        # Anyone can type this, unauthenticated: cleaned and bounded like every actor.
        typed = actor_name(str(data.get("username") or "?"))
        Operator(dash.app, actor=typed, source=client_of(request)).audit(
            "login", "dashboard", "refused"
        )
        return dash.page(
            request,
            "login.html",
            status=401,
            next=target,
            error="Invalid credentials.",
            has_password=bool(config.password),
            has_token=bool(config.token),
        )
    Operator(dash.app, actor=user, source=client_of(request)).audit("login", "dashboard", "ok")
    response = RedirectResponse(target, status_code=303)
    secure = (
        config.cookie_secure if config.cookie_secure is not None else request.url.scheme == "https"
    )
    response.set_cookie(
        SESSION_COOKIE,
        dash.sessions.open(user),
        max_age=int(config.session_ttl),
        httponly=True,
        samesite="strict",
        secure=secure,
        path=cookie_path(request.scope),
    )
    return response


def logout(request: Request, data: dict[str, Any]) -> Response:
    """End the session on the server (its cookie is refused from now on) and drop the cookie."""
    dash = dashboard_of(request)
    dash.sessions.close(request.cookies.get(SESSION_COOKIE, ""))
    target = "/login" if dash.config.auth_enabled else "/"
    response = RedirectResponse(at_root(request, target), status_code=303)
    path = cookie_path(request.scope)
    response.delete_cookie(SESSION_COOKIE, path=path)
    if path != "/":  # a cookie an older version set for the whole host
        response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def pause_queue(request: Request, data: dict[str, Any]) -> Response:
    """Pause a queue."""
    name = request.path_params["name"]
    dashboard_of(request).operator(request).pause_queue(name)
    return done(request, back(request, data, "/"), f"Queue {name} paused.")


def resume_queue(request: Request, data: dict[str, Any]) -> Response:
    """Resume a queue."""
    name = request.path_params["name"]
    dashboard_of(request).operator(request).resume_queue(name)
    return done(request, back(request, data, "/"), f"Queue {name} resumed.")


def _job_url(job_id: str) -> str:
    return "/jobs/" + segment(job_id)


def cancel_job(request: Request, data: dict[str, Any]) -> Response:
    """Cancel a job (a running one: its worker is asked to stop it)."""
    job_id = request.path_params["id"]
    ok = dashboard_of(request).operator(request).cancel(job_id)
    return done(
        request,
        back(request, data, _job_url(job_id)),
        "Job cancelled (a running job stops within about a second)."
        if ok
        else "The job could not be cancelled (already finished).",
    )


def retry_job(request: Request, data: dict[str, Any]) -> Response:
    """Requeue a dead-lettered or cancelled job."""
    job_id = request.path_params["id"]
    ok = dashboard_of(request).operator(request).retry(job_id)
    return done(
        request,
        back(request, data, _job_url(job_id)),
        "Job requeued." if ok else "Only dead-lettered or cancelled jobs can be retried.",
    )


def run_now(request: Request, data: dict[str, Any]) -> Response:
    """Make a scheduled (delayed) or retrying job due now."""
    job_id = request.path_params["id"]
    ok = dashboard_of(request).operator(request).run_now(job_id)
    return done(
        request,
        back(request, data, _job_url(job_id)),
        "Job made due now." if ok else "Only scheduled or retrying jobs can be run now.",
    )


def delete_job(request: Request, data: dict[str, Any]) -> Response:
    """Delete a job that is not running; never returns to the deleted job's own page."""
    job_id = request.path_params["id"]
    dash = dashboard_of(request)
    before = dash.app.broker.get(job_id)
    ok = dash.operator(request).delete(job_id, unfinished=True)
    listing = "/dead" if before is not None and before.state == "dead_letter" else "/jobs"
    own = at_root(request, _job_url(job_id))
    return done(
        request,
        back(request, data, listing, avoid=own) if ok else back(request, data, _job_url(job_id)),
        "Job deleted." if ok else "A running job cannot be deleted.",
    )


def _filters(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in SEARCH_FIELDS and k != "state" and v}


def _dead_url(filters: dict[str, Any]) -> str:
    return "/dead" + ("?" + urlencode(filters) if filters else "")


def retry_dead(request: Request, data: dict[str, Any]) -> Response:
    """Requeue every dead letter matching the form's filters."""
    filters = _filters(data)
    n = dashboard_of(request).operator(request).retry_dead(filters)
    return done(request, at_root(request, _dead_url(filters)), f"{n} dead letters requeued.")


def delete_dead(request: Request, data: dict[str, Any]) -> Response:
    """Delete every dead letter matching the form's filters."""
    filters = _filters(data)
    n = dashboard_of(request).operator(request).delete_dead(filters)
    return done(request, at_root(request, _dead_url(filters)), f"{n} dead letters deleted.")


def pause_schedule(request: Request, data: dict[str, Any]) -> Response:
    """Pause a schedule."""
    name = request.path_params["name"]
    dashboard_of(request).operator(request).pause_schedule(name)
    return done(request, back(request, data, "/schedules"), f"Schedule {name} paused.")


def resume_schedule(request: Request, data: dict[str, Any]) -> Response:
    """Resume a schedule."""
    name = request.path_params["name"]
    dashboard_of(request).operator(request).resume_schedule(name)
    return done(request, back(request, data, "/schedules"), f"Schedule {name} resumed.")


def acknowledge(request: Request, data: dict[str, Any]) -> Response:
    """Acknowledge a firing alert."""
    key = request.path_params["key"]
    ok = dashboard_of(request).operator(request).acknowledge(key)
    return done(
        request,
        back(request, data, "/alerts"),
        "Alert acknowledged." if ok else "The alert is not firing.",
    )


def routes() -> list[Route]:
    """The POST routes of the HTML pages (all CSRF-checked)."""
    post = ["POST"]
    return [
        Route("/login", action(login, allow_read_only=True), methods=post),
        Route("/logout", action(logout, allow_read_only=True), methods=post),
        Route("/queues/{name:segment}/pause", action(pause_queue), methods=post),
        Route("/queues/{name:segment}/resume", action(resume_queue), methods=post),
        Route("/jobs/{id:segment}/cancel", action(cancel_job), methods=post),
        Route("/jobs/{id:segment}/retry", action(retry_job), methods=post),
        Route("/jobs/{id:segment}/delete", action(delete_job), methods=post),
        Route("/jobs/{id:segment}/run-now", action(run_now), methods=post),
        Route("/dead/retry", action(retry_dead), methods=post),
        Route("/dead/delete", action(delete_dead), methods=post),
        Route("/schedules/{name:segment}/pause", action(pause_schedule), methods=post),
        Route("/schedules/{name:segment}/resume", action(resume_schedule), methods=post),
        Route("/alerts/{key:segment}/acknowledge", action(acknowledge), methods=post),
    ]
