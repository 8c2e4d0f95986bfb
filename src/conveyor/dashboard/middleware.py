"""The security middleware: headers, rate limits, authentication and the cross-site check.

One ASGI middleware applies the rules of ``security`` to every HTTP request before a route runs:
it sets the security headers and the CSRF cookie, limits log-in attempts and API calls per
client, authenticates (a session cookie counts only while its server-side record lives, see
``hardening.SessionStore``) and refuses cross-site writes.

Without credentials it answers only requests that arrived on a loopback address — the rule
``conveyor dashboard`` enforces at bind time (``security.check_bind``), applied per request so it
also holds when another app mounts the dashboard and decides where it listens.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .hardening import cookie_path, route_path
from .redirects import at_root
from .security import (
    CSRF_COOKIE,
    SECURITY_HEADERS,
    SESSION_COOKIE,
    Identity,
    authenticate,
    cross_site,
    external_identity,
    is_loopback,
    new_csrf_seed,
)
from .server import PUBLIC_PATHS, SAFE_METHODS, Dashboard, client_of, wants_json

OPEN_BEYOND_LOOPBACK = (
    "this dashboard has no credentials, so it only answers on a loopback address: set "
    "CONVEYOR_DASHBOARD_TOKEN or CONVEYOR_DASHBOARD_USERNAME/CONVEYOR_DASHBOARD_PASSWORD "
    "(DashboardConfig(token=...)), or DashboardConfig(external_auth=True) when the app that "
    "mounts it authenticates every request itself"
)


class SecurityMiddleware:
    """Headers, rate limits, authentication and cross-site refusal for every HTTP request."""

    def __init__(self, app: ASGIApp, dash: Dashboard) -> None:
        self.app = app
        self.dash = dash

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        config, dash = self.dash.config, self.dash
        seed = request.cookies.get(CSRF_COOKIE)
        fresh_seed = None if seed else new_csrf_seed()
        scope["conveyor.csrf_seed"] = seed or fresh_seed
        ident = authenticate(config, request.headers, request.cookies, dash.app.now(), _never)
        if request.cookies.get(SESSION_COOKIE) and (ident is None or ident.via == "none"):
            # A signed session cookie counts only while its server-side record lives.
            ident = await run_in_threadpool(
                authenticate,
                config,
                request.headers,
                request.cookies,
                dash.app.now(),
                dash.sessions.alive,
            )
        if ident is None or ident.via == "none":  # the mounting app's user (external_auth)
            ident = external_identity(config, scope) or ident
        response = self._refuse(request, ident)
        secure = (
            config.cookie_secure
            if config.cookie_secure is not None
            else scope.get("scheme") == "https"
        )

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in SECURITY_HEADERS.items():
                    headers.setdefault(key, value)
                if fresh_seed:
                    headers.append(
                        "set-cookie",
                        f"{CSRF_COOKIE}={fresh_seed}; Path={cookie_path(scope)}; HttpOnly; "
                        f"SameSite=Strict{'; Secure' if secure else ''}",
                    )
            await send(message)

        if response is not None:
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refuse(self, request: Request, ident: Identity | None) -> Response | None:
        """A refusal response, or None to let the request through (identity set on scope)."""
        path = route_path(request.scope)
        dash, client = self.dash, client_of(request)
        if _open_beyond_loopback(dash, request, path):
            return JSONResponse({"error": OPEN_BEYOND_LOOPBACK}, status_code=403)
        if path == "/login" and request.method == "POST":
            wait = dash.login_limiter.allow(f"login:{client}")
            if wait:
                return _too_many(wait)
        public = path in PUBLIC_PATHS or path.startswith("/static/")
        if ident is None and not public:
            if request.headers.get("authorization"):
                wait = dash.login_limiter.allow(f"login:{client}")
                if wait:
                    return _too_many(wait)
            if wants_json(request) or request.method not in SAFE_METHODS:
                return JSONResponse(
                    {"error": "authentication required"},
                    status_code=401,
                    headers={"www-authenticate": 'Bearer realm="conveyor"'},
                )
            return RedirectResponse(
                at_root(request, "/login") + "?next=" + quote(request.url.path), status_code=303
            )
        request.scope["conveyor.identity"] = ident or Identity("anonymous", "none")
        if path.startswith("/api/"):
            key = ident.user if ident is not None and ident.by_header else client
            wait = dash.api_limiter.allow(f"api:{key}")
            if wait:
                return _too_many(wait)
        if request.method not in SAFE_METHODS:
            host = request.headers.get("host", "")
            if cross_site(request.headers, request.url.scheme, host):
                return JSONResponse({"error": "cross-site request refused"}, status_code=403)
        return None


def _open_beyond_loopback(dash: Dashboard, request: Request, path: str) -> bool:
    """True for a request that arrived on a non-loopback address (ASGI ``server``) of a
    dashboard without credentials (``/healthz`` excepted): ``check_bind``'s rule, per request."""
    config = dash.config
    if config.auth_enabled or config.external_auth or path == "/healthz":
        return False
    server = request.scope.get("server")
    return not (isinstance(server, tuple | list) and server and is_loopback(str(server[0])))


def _never(sid: str) -> bool:
    """Session check for the first, broker-free pass of authentication."""
    return False


def _too_many(wait: float) -> Response:
    return JSONResponse(
        {"error": "rate limit exceeded", "retry_after": round(wait, 3)},
        status_code=429,
        headers={"retry-after": str(max(1, round(wait)))},
    )
