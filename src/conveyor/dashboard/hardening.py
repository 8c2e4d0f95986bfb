"""Defences at the edge of the dashboard: Host check, body caps, ids as one path segment,
trusted proxies, server-side sessions and rate limits.

* **Host** (DNS rebinding): Starlette's ``TrustedHostMiddleware`` answers 400 to any ``Host``
  that is not the bound address (on loopback: ``127.0.0.1``, ``localhost``, ``[::1]``) or a
  configured ``allowed_hosts`` name, so a page on another name that resolves to us gets nothing.
* **Bodies**: ``BodyLimit`` refuses (413) a request whose ``Content-Length`` is over the cap
  before reading a byte, and stops reading a body without one (chunked) at the cap.
* **Mount prefix**: checks look at ``route_path`` (the path below the ASGI ``root_path``), so
  ``/admin/jobs/api/...`` gets the API's limits when the dashboard is mounted at ``/admin/jobs``.
* **Ids in paths**: a job id may hold ``/`` and ``..``. Links quote it as ONE segment
  (``quote(id, safe="")``); ``SegmentPaths`` keeps an encoded ``/`` (``%2F``) encoded in the
  path the router matches, and the ``segment`` convertor decodes it for the handler, so
  ``zz%2F..%2F..%2Fjobs%2Fvictim-1`` addresses that job and never ``victim-1``.
* **Proxies**: uvicorn trusts ``X-Forwarded-For`` only from ``forwarded_allow_ips`` (none by
  default), so rate limits and the audit log see the real peer address.
* **Sessions**: a session cookie is only honoured while its record lives in the broker
  (collection ``dashboard_sessions``); logging out deletes it, on every dashboard process.
* **Rate limits**: ``RateLimiter`` token buckets per client, for the API and log-in attempts.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ValidationError
from .security import DashboardConfig, is_loopback, make_session, new_session_id, read_session

if TYPE_CHECKING:
    from ..app import Conveyor

SESSIONS = "dashboard_sessions"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_BINDS = ("0.0.0.0", "::", "[::]", "")
_ESCAPED = re.compile(r"%(25|2F)")


def root_of(scope: Mapping[str, Any]) -> str:
    """The prefix the dashboard is mounted under (ASGI ``root_path``; ``""`` standalone)."""
    return str(scope.get("root_path", "") or "").rstrip("/")


def cookie_path(scope: Mapping[str, Any]) -> str:
    """The ``Path`` of the dashboard's cookies: its mount prefix (``/admin/jobs``), so the
    browser sends them to the dashboard only, not to every page of the app that mounts it (nor
    to a second dashboard mounted elsewhere on the host); ``/`` standalone. Percent-encoded as
    the browser sees the path (no ``;`` or control character can reach the header)."""
    return quote(root_of(scope), safe="/:@!$&'()*+,=-._~") or "/"


def route_path(scope: Mapping[str, Any]) -> str:
    """The request path below ``root_path`` (``/jobs`` for ``/admin/jobs/jobs`` mounted at
    ``/admin/jobs``): what routing and the security checks look at."""
    path, root = str(scope.get("path", "")), root_of(scope)
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


def segment(value: str) -> str:
    """``value`` quoted as one URL path segment (``/`` becomes ``%2F``)."""
    return quote(str(value), safe="")


class SegmentConvertor(Convertor[str]):
    """One path segment as ``SegmentPaths`` leaves it: ``%2F`` and ``%25`` decoded here."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        """The segment's text: ``%2F`` -> ``/``, ``%25`` -> ``%``."""
        return _ESCAPED.sub(lambda m: "/" if m.group(1) == "2F" else "%", value)

    def to_string(self, value: str) -> str:
        """The inverse of ``convert`` (for ``url_path_for``)."""
        return str(value).replace("%", "%25").replace("/", "%2F")


register_url_convertor("segment", SegmentConvertor())


class SegmentPaths:
    """Route on segments of the raw path: an encoded ``/`` stays inside its segment.

    Servers hand ASGI apps a percent-decoded ``path``, where ``a%2Fb`` and ``a/b`` look the
    same. When the raw path holds ``%2F`` (or ``%25``), the path is rebuilt from the raw
    segments with only ``/`` and ``%`` kept escaped, for the ``segment`` convertor to decode.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and (b"%2" in raw.upper()):
            text = raw.decode("latin-1").partition("?")[0]
            if unquote(text) == scope["path"]:  # raw and decoded paths describe the same thing
                parts = [
                    unquote(p).replace("%", "%25").replace("/", "%2F") for p in text.split("/")
                ]
                scope = dict(scope, path="/".join(parts))
        await self.app(scope, receive, send)


class BodyTooLarge(ValidationError):
    """A request body over the configured cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__("body", f"is larger than the limit of {limit} bytes")


def _too_large(limit: int) -> JSONResponse:
    exc = BodyTooLarge(limit)
    return JSONResponse({"error": str(exc), "field": "body", "limit": limit}, status_code=413)


class BodyLimit:
    """413 for bodies over ``max_api_body`` (``/api/``) or ``max_body`` (everything else)."""

    def __init__(self, app: ASGIApp, config: DashboardConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        api = route_path(scope).startswith("/api/")
        limit = self.config.max_api_body if api else self.config.max_body
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and not _within(declared, limit):
            await _too_large(limit)(scope, receive, send)  # refused before reading a byte
            return
        received = 0
        started = False

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:  # chunked, or a body longer than its Content-Length
                    raise BodyTooLarge(limit)
            return message

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watch)
        except BodyTooLarge:
            if started:
                raise
            await _too_large(limit)(scope, receive, send)


def _within(declared: str, limit: int) -> bool:
    """A Content-Length header that is a plain number no larger than ``limit``."""
    text = declared.strip()
    return text.isascii() and text.isdigit() and len(text) <= 18 and int(text) <= limit


def trusted_hosts(bind: str, config: DashboardConfig) -> list[str]:
    """Host header names accepted for a server bound on ``bind``."""
    names = list(config.allowed_hosts)
    host = bind.strip().lower()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    if is_loopback(bind):
        names += LOOPBACK_NAMES
    if host not in WILDCARD_BINDS:
        names.append(host)
    return list(dict.fromkeys(names))


def check_hosts(bind: str, config: DashboardConfig) -> None:
    """Refuse a wildcard bind (``0.0.0.0``) without the names clients will use."""
    if bind.strip() in WILDCARD_BINDS and not config.allowed_hosts:
        raise ValidationError(
            "allowed_hosts",
            f"binding {bind!r} accepts any address, so the dashboard cannot tell its own name: "
            "give the names clients use with --allowed-host NAME (CONVEYOR_DASHBOARD_ALLOWED_HOSTS"
            "), or '*' to accept any Host header",
        )


def uvicorn_options(config: DashboardConfig) -> dict[str, Any]:
    """uvicorn settings for forwarded headers: off unless proxies are configured."""
    if not config.forwarded_allow_ips:
        return {"proxy_headers": False, "forwarded_allow_ips": ""}
    return {"proxy_headers": True, "forwarded_allow_ips": ",".join(config.forwarded_allow_ips)}


class SessionStore:
    """Server-side session records, so a cookie dies with its logout (on every process)."""

    def __init__(self, app: Conveyor, config: DashboardConfig) -> None:
        self.app = app
        self.config = config

    def open(self, user: str) -> str:
        """Record a new session for ``user``; returns the signed cookie value."""
        now, sid = self.app.now(), new_session_id()
        doc = {"user": user, "at": now}
        self.app.broker.docs.put(SESSIONS, sid, doc, now, ttl=self.config.session_ttl)
        return make_session(self.config, user, now, sid)

    def alive(self, sid: str) -> bool:
        """True while the session's record exists (not logged out, not expired)."""
        return self.app.broker.docs.get(SESSIONS, sid, self.app.now()) is not None

    def close(self, cookie: str) -> None:
        """Forget the session of a cookie value (logout); unknown cookies are ignored."""
        session = read_session(self.config, cookie, self.app.now())
        if session is not None:
            self.app.broker.docs.delete(SESSIONS, session[1])


class RateLimiter:
    """Token buckets per client key: ``rate`` tokens per second, up to ``burst``."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str, now: float | None = None) -> float:
        """0 when a request may proceed now, else the seconds to wait."""
        if self.rate <= 0:
            return 0.0
        at = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, at))
            tokens = min(self.burst, tokens + (at - last) * self.rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, at)
                if len(self._buckets) > 10_000:
                    self._buckets.pop(next(iter(self._buckets)))
                return 0.0
            self._buckets[key] = (tokens, at)
            return (1 - tokens) / self.rate
