"""The limits page and its API (issue 15): flow control seen and changed from a browser.

GET ``/limits`` (declared limits, run-time overrides, tokens left per bucket, running jobs per
key, waiting jobs per group and why), POST ``/limits/set`` and ``/limits/clear`` (through
``server.action``: read-only refusal, CSRF; audited as ``limits.set`` / ``limits.clear``).
JSON: GET ``/api/limits`` and POST ``/api/limits`` (``{"name", "value", "burst"}``; ``value``
null clears). Changes reach every worker at its next claim: no restart. Internal URLs carry the
mount prefix (``root_path``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..monitoring import limits as limits_mod
from .redirects import at_root, done
from .server import action, dashboard_of


def limits_page(request: Request) -> Response:
    """Every limit and what waits for it."""
    dash = dashboard_of(request)
    data = limits_mod.limits(dash.app.runtime)
    names = sorted(set(data["declared"]) | set(data["limits"]))
    return dash.page(request, "limits.html", data=data, names=names, nav="limits")


def _burst(data: dict[str, Any]) -> float | None:
    raw = data.get("burst")
    if raw in (None, ""):
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        from ..errors import ValidationError

        raise ValidationError("burst", f"must be a number >= 1, got {raw!r}") from None


def _apply(request: Request, name: Any, value: Any, burst: float | None) -> None:
    dash = dashboard_of(request)
    limits_mod.set_limit(dash.app.runtime, name, value, burst)
    op = dash.operator(request)
    op.audit("limits.clear" if value is None else "limits.set", str(name), "ok", value=value)


def set_limit(request: Request, data: dict[str, Any]) -> Response:
    """Override a limit from the form."""
    name, value = data.get("name"), (data.get("value") or "").strip()
    _apply(request, name, value, _burst(data))
    return done(request, at_root(request, "/limits"), f"{name} set to {value}.")


def clear_limit(request: Request, data: dict[str, Any]) -> Response:
    """Drop an override from the form."""
    name = data.get("name")
    _apply(request, name, None, None)
    return done(request, at_root(request, "/limits"), f"{name}: override cleared.")


def api_limits(request: Request) -> Response:
    """``GET /api/limits``: the same data as the page, as JSON."""
    return JSONResponse(limits_mod.limits(dashboard_of(request).app.runtime))


def api_set_limit(request: Request, data: dict[str, Any]) -> Response:
    """``POST /api/limits``: ``{"name": "rate:task", "value": "10/s", "burst": 20}``."""
    value = data.get("value")
    _apply(request, data.get("name"), None if value is None else str(value), _burst(data))
    return JSONResponse(
        {"ok": True, "limits": limits_mod.limits(dashboard_of(request).app.runtime)}
    )


def routes() -> list[Route]:
    """The routes of this module."""
    post = ["POST"]
    return [
        Route("/limits", limits_page),
        Route("/limits/set", action(set_limit), methods=post),
        Route("/limits/clear", action(clear_limit), methods=post),
        Route("/api/limits", api_limits),
        Route("/api/limits", action(api_set_limit), methods=post),
    ]
