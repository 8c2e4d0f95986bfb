"""The dashboard ASGI application: ``create_app(conveyor_app)`` and ``serve(...)``.

A Starlette app with server-rendered pages (Jinja2 + vendored htmx), live updates over SSE,
a JSON API under ``/api/v1`` with an OpenAPI document, and Prometheus ``/metrics``. Middlewares,
outermost first: the Host check, ids as path segments and the body cap (``hardening``), then
headers, rate limits, authentication and the cross-site check (``middleware``); ``action`` wraps
every state-changing endpoint with the read-only and CSRF checks, so no write can skip them.

Mountable under any prefix (``api.mount("/admin/jobs", create_app(app))``): routing and every
check use the path below the ASGI ``root_path`` (``route_path``), and every link, asset, live
URL, form action and redirect is built from ``root_path`` (templates: ``{{ root_path }}/...``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..core.values import loads_exact
from ..errors import BrokerConfigError, BrokerUnavailable, ConveyorError, ValidationError
from ..monitoring.actions import Operator
from ..monitoring.inspect import Inspector
from .hardening import (
    BodyLimit,
    BodyTooLarge,
    RateLimiter,
    SegmentPaths,
    SessionStore,
    check_hosts,
    root_of,
    route_path,
    trusted_hosts,
    uvicorn_options,
)
from .redirects import at_root, flash_of, safe_target
from .render import STATIC, Renderer
from .security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    DashboardConfig,
    Identity,
    check_bind,
    csrf_token,
    csrf_valid,
)

if TYPE_CHECKING:
    from ..app import Conveyor

log = logging.getLogger("conveyor.dashboard")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
PUBLIC_PATHS = ("/login", "/healthz")
UNAVAILABLE_RETRY_AFTER = 5  # seconds a client waits after a 503 (the broker is unreachable)
Handler = Callable[[Request, dict[str, Any]], Response]


@dataclass
class Dashboard:
    """Shared state of one dashboard app (``request.app.state.dashboard``)."""

    app: Conveyor
    config: DashboardConfig
    renderer: Renderer = field(default_factory=Renderer)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.inspector = Inspector(self.app)
        self.sessions = SessionStore(self.app, self.config)
        self.api_limiter = RateLimiter(self.config.rate_limit, self.config.rate_burst)
        self.login_limiter = RateLimiter(
            self.config.login_per_minute / 60.0, self.config.login_per_minute
        )

    def operator(self, request: Request) -> Operator:
        """Audited actions on behalf of the requester."""
        return Operator(self.app, actor=identity_of(request).user, source=client_of(request))

    def page(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        """Render a full page with the common context (user, CSRF token, flags)."""
        html = self.renderer.render(template, **self.context(request), **context)
        return HTMLResponse(html, status_code=status, headers={"cache-control": "no-store"})

    def context(self, request: Request) -> dict[str, Any]:
        """Values every template may use."""
        ident = identity_of(request)
        return {
            "request": request,
            "user": ident.user,
            "auth": self.config.auth_enabled,
            "csrf": csrf_token(self.config, request.scope.get("conveyor.csrf_seed", "")),
            "read_only": self.config.read_only,
            "flash": flash_of(self.config, request.query_params),
            "path": request.url.path,
            "root_path": root_of(request.scope),
            # this page with its query (filters, page), for forms that must come back here
            "here": safe_target(request, str(request.url)) or at_root(request, "/"),
            "live_interval": self.config.live_interval,
        }


def dashboard_of(request: Request) -> Dashboard:
    """The Dashboard behind a request."""
    dash: Dashboard = request.app.state.dashboard
    return dash


def identity_of(request: Request) -> Identity:
    """The authenticated identity of a request (set by the security middleware)."""
    ident = request.scope.get("conveyor.identity")
    return ident if isinstance(ident, Identity) else Identity("anonymous", "none")


def client_of(request: Request) -> str:
    """The client's address (for rate limits and the audit log)."""
    return request.client.host if request.client else ""


def wants_json(request: Request) -> bool:
    """API, metrics and live paths answer errors in JSON/plain text, not HTML."""
    return route_path(request.scope).startswith(("/api/", "/live/", "/metrics"))


def error_response(
    request: Request,
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> Response:
    """An error as JSON (API) or an HTML page."""
    if wants_json(request) or not hasattr(request.app.state, "dashboard"):
        response: Response = JSONResponse({"error": message, **extra}, status_code=status)
    else:
        response = dashboard_of(request).page(
            request, "error.html", status=status, status_code=status, message=message
        )
    response.headers.update(headers or {})
    return response


async def read_body(request: Request) -> dict[str, Any]:
    """The request body as a dict: JSON object or form fields (empty when there is none)."""
    ctype = request.headers.get("content-type", "")
    if "application/json" in ctype:
        raw = await request.body()
        if not raw:
            return {}
        try:  # an integer beyond 64 bits is refused too (orjson would read a float)
            data = loads_exact(raw)
        except ValueError as exc:
            raise ValidationError("body", f"is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValidationError("body", "must be a JSON object")
        return data
    if "form" in ctype:
        form = await request.form()
        fields: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
        if "ids" in form:  # the checkboxes of a bulk selection: every value, in order
            fields["ids"] = [v for v in form.getlist("ids") if isinstance(v, str)]
        return fields
    return {}


def action(
    handler: Handler, *, allow_read_only: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a state-changing endpoint: read-only refusal, CSRF check, then run in a thread."""

    async def endpoint(request: Request) -> Response:
        dash = dashboard_of(request)
        if dash.config.read_only and not allow_read_only:
            return error_response(request, 403, "the dashboard is in read-only mode")
        data = await read_body(request)
        if not identity_of(request).by_header:
            presented = request.headers.get(CSRF_HEADER) or data.get(CSRF_FIELD)
            seed = request.cookies.get(CSRF_COOKIE)
            if not csrf_valid(dash.config, seed, presented if isinstance(presented, str) else None):
                return error_response(
                    request, 403, "CSRF token missing or invalid: reload the page"
                )
        data.pop(CSRF_FIELD, None)
        return await run_in_threadpool(handler, request, data)

    endpoint.__name__ = getattr(handler, "__name__", "action")
    return endpoint


def _exception_handlers() -> Mapping[Any, Any]:
    from ..errors import JobNotFound

    def not_found(request: Request, exc: Exception) -> Response:
        return error_response(request, 404, str(exc))

    def too_large(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": str(exc), "field": "body"}, status_code=413)

    def invalid(request: Request, exc: Exception) -> Response:
        field_name = getattr(exc, "field", None)
        return error_response(request, 422, str(exc), field=field_name)

    def conveyor_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, LookupError):
            return not_found(request, exc)
        return error_response(request, 400, str(exc))

    def unavailable(request: Request, exc: Exception) -> Response:
        # The broker is down or refuses our URL / credentials: not the request's fault (was a
        # 400); when it is down, say when to try again.
        down = isinstance(exc, BrokerUnavailable)
        retry = {"retry-after": str(UNAVAILABLE_RETRY_AFTER)} if down else None
        return error_response(request, 503, str(exc), headers=retry)

    return {
        JobNotFound: not_found,
        BodyTooLarge: too_large,
        ValidationError: invalid,
        BrokerUnavailable: unavailable,
        BrokerConfigError: unavailable,
        ConveyorError: conveyor_error,
    }


def create_app(
    app: Conveyor,
    config: DashboardConfig | None = None,
    *,
    host: str = "127.0.0.1",
    **overrides: Any,
) -> Starlette:
    """The dashboard for ``app`` served on address ``host`` (the Host header check uses it);
    ``config`` defaults to ``DashboardConfig.from_env(...)``."""
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    from . import api, bulk, flow_pages, forms, limits_pages, live, ops_pages, views
    from .middleware import SecurityMiddleware

    cfg = config or DashboardConfig.from_env(**overrides)
    dash = Dashboard(app, cfg)
    routes = [
        *ops_pages.routes(),
        *flow_pages.routes(),
        *limits_pages.routes(),
        *views.routes(),
        *bulk.routes(),
        *forms.routes(),
        *live.routes(),
        *api.routes(),
        Route("/healthz", lambda request: PlainTextResponse("ok")),
        # Browsers ask for /favicon.ico on their own; answer it rather than log a 404.
        Route(
            "/favicon.ico",
            lambda request: RedirectResponse(at_root(request, "/static/favicon.svg"), 301),
        ),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    web = Starlette(routes=routes, exception_handlers=dict(_exception_handlers()))
    web.state.dashboard = dash
    # Outermost last: Host check, then ids as segments, body cap, then authentication.
    web.add_middleware(SecurityMiddleware, dash=dash)
    web.add_middleware(BodyLimit, config=cfg)
    web.add_middleware(SegmentPaths)
    allowed = trusted_hosts(host, cfg)
    web.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed, www_redirect=False)
    return web


def serve(
    app: Conveyor,
    host: str = "127.0.0.1",
    port: int = 8000,
    config: DashboardConfig | None = None,
    **overrides: Any,
) -> None:
    """Run the dashboard with uvicorn until interrupted (refuses unsafe binds)."""
    import uvicorn

    cfg = config or DashboardConfig.from_env(**overrides)
    check_bind(host, cfg)
    check_hosts(host, cfg)
    if not cfg.auth_enabled:
        log.warning("dashboard running WITHOUT authentication on %s (loopback only)", host)
    web = create_app(app, cfg, host=host)
    uvicorn.run(
        web,
        host=host,
        port=port,
        log_level="warning",
        log_config=None,  # uvicorn's loggers use the process's handler (--log-format json too)
        timeout_graceful_shutdown=2,
        **uvicorn_options(cfg),
    )


class BackgroundServer:
    """The dashboard served by uvicorn from a daemon thread (tests, ``conveyor demo``)."""

    def __init__(
        self,
        app: Conveyor,
        host: str = "127.0.0.1",
        port: int = 0,
        config: DashboardConfig | None = None,
        **overrides: Any,
    ) -> None:
        import uvicorn

        cfg = config or DashboardConfig.from_env(**overrides)
        check_bind(host, cfg)
        check_hosts(host, cfg)
        self.web = create_app(app, cfg, host=host)
        self.dashboard: Dashboard = self.web.state.dashboard
        self.host = host
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.port = int(self._sock.getsockname()[1])
        uv_config = uvicorn.Config(
            self.web,
            log_level="warning",
            timeout_graceful_shutdown=1,
            lifespan="off",
            **uvicorn_options(cfg),
        )
        self.server = uvicorn.Server(uv_config)
        self._thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [self._sock]},
            name="conveyor-dashboard",
            daemon=True,
        )

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the dashboard server did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End live streams and stop the server."""
        self.dashboard.stopping.set()
        self.server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()


def serve_in_thread(
    app: Conveyor,
    host: str = "127.0.0.1",
    port: int = 0,
    config: DashboardConfig | None = None,
    **overrides: Any,
) -> str:
    """Serve the dashboard from a daemon thread until the process exits; returns its URL."""
    return BackgroundServer(app, host, port, config, **overrides).start().url


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter within bounds (422 on garbage)."""
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValidationError(name, "must be an integer") from exc
    if not low <= value <= high:
        raise ValidationError(name, f"must be between {low} and {high}")
    return value
