"""The dashboard inside a Django ASGI deployment, behind Django's staff login.

``application = with_dashboard(get_asgi_application(), "/admin/jobs")`` in your asgi.py sends
every request under the prefix to the dashboard once Django's own session says the user is an
active staff member: anonymous browsers are redirected to ``settings.LOGIN_URL`` (then back),
a logged-in non-staff user gets 403. Everything else goes to Django unchanged.

The check runs Django's session and auth machinery (``SessionMiddleware``'s engine,
``auth.get_user``, so session-hash invalidation on password change applies). The dashboard itself
runs with its own rules (CSRF on every action, the Host check against ``ALLOWED_HOSTS``, rate
limits); it has no credentials of its own, so it must only be reachable through this wrapper.
Actions are audited as the Django user's username (passed on as the scope's
``conveyor.external_user``).
A WSGI deployment serves the dashboard as a separate process instead (``conveyor dashboard``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ...dashboard.security import EXTERNAL_USER

if TYPE_CHECKING:
    from ...app import Conveyor
    from ...dashboard.security import DashboardConfig

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def allowed_hosts_of(django_hosts: list[str]) -> tuple[str, ...]:
    """Django's ``ALLOWED_HOSTS`` as the dashboard's Host names (``.example.com`` included)."""
    names: list[str] = []
    for host in django_hosts:
        if host.startswith("."):  # Django: the domain and every subdomain
            names += [host[1:], "*" + host]
        else:
            names.append(host)
    return tuple(names)


def staff_user(scope: Scope) -> tuple[bool, bool]:
    """``(authenticated, staff)`` of the Django session a request carries (sync: ORM reads)."""
    authenticated, staff, _ = staff_member(scope)
    return authenticated, staff


def staff_member(scope: Scope) -> tuple[bool, bool, str]:
    """``(authenticated, staff, username)`` of the Django session a request carries (sync)."""
    from django.conf import settings
    from django.contrib.auth import get_user
    from django.http import HttpRequest

    request = HttpRequest()
    cookies = _cookies(scope)
    engine = import_module(settings.SESSION_ENGINE)
    request.session = engine.SessionStore(cookies.get(settings.SESSION_COOKIE_NAME))
    user = get_user(request)
    authenticated = bool(user.is_authenticated)
    staff = authenticated and bool(user.is_active and user.is_staff)
    return authenticated, staff, str(user.get_username()) if authenticated else ""


def _cookies(scope: Scope) -> dict[str, str]:
    from django.http import parse_cookie

    for name, value in scope.get("headers", []):
        if name == b"cookie":
            return dict(parse_cookie(value.decode("latin-1")))
    return {}


class StaffDashboard:
    """An ASGI app: the dashboard for Django staff, a log-in redirect or 403 for others."""

    def __init__(self, dashboard: ASGIApp) -> None:
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.dashboard(scope, receive, send)
            return
        from asgiref.sync import sync_to_async

        authenticated, staff, name = await sync_to_async(staff_member, thread_sensitive=True)(scope)
        if staff:
            scope[EXTERNAL_USER] = name  # the dashboard audits actions as this user
            await self.dashboard(scope, receive, send)
        elif authenticated:
            await _respond(send, 403, b"staff only", [])
        else:
            await _respond(send, 302, b"", [(b"location", _login_url(scope).encode())])


def _login_url(scope: Scope) -> str:
    from django.conf import settings
    from django.shortcuts import resolve_url
    from django.utils.http import urlencode

    here = scope["path"]  # the full path (ASGI: root_path is a prefix of it)
    if scope.get("query_string"):
        here += "?" + scope["query_string"].decode("latin-1")
    return f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': here})}"


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), *headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def with_dashboard(
    django_app: ASGIApp,
    path: str = "/admin/jobs",
    *,
    app: Conveyor | None = None,
    config: DashboardConfig | None = None,
) -> ASGIApp:
    """Django's ASGI app with the dashboard of ``app`` (the project's) at ``path``, staff only."""
    from django.conf import settings

    from ...dashboard.security import DashboardConfig
    from ...errors import ValidationError
    from ..starlette import dashboard_app
    from . import get_app

    if not path.startswith("/") or path.endswith("/"):
        raise ValidationError("path", "must start with '/' and not end with '/'")
    # no credentials of its own: Django's staff check is the gate (external_auth tells the
    # dashboard so, or it would refuse every request that did not arrive on loopback)
    cfg = config or DashboardConfig(external_auth=True)
    hosts = allowed_hosts_of(list(settings.ALLOWED_HOSTS)) or ("localhost",)
    gated = StaffDashboard(dashboard_app(app or get_app(), cfg, allowed_hosts=hosts))

    async def router(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == path:
            location = (scope.get("root_path", "") + path + "/").encode()
            await _respond(send, 308, b"", [(b"location", location)])
            return
        if scope["type"] == "http" and _under(scope["path"], path):
            child = dict(scope)
            child["root_path"] = scope.get("root_path", "") + path
            child["path"] = scope["path"]  # Starlette reads root_path as the mount prefix
            await gated(child, receive, send)
            return
        await django_app(scope, receive, send)

    return router


def _under(request_path: str, prefix: str) -> bool:
    return request_path == prefix or request_path.startswith(prefix + "/")
