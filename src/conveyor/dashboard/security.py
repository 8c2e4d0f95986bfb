"""Dashboard security: configuration, authentication, sessions, CSRF, rate limits, headers.

Rules (see docs/monitoring.md):

* Authentication is on whenever credentials are configured — a bearer token
  (``CONVEYOR_DASHBOARD_TOKEN``) and/or a username and password
  (``CONVEYOR_DASHBOARD_USERNAME`` / ``CONVEYOR_DASHBOARD_PASSWORD``). There is no default
  password. Binding beyond loopback without credentials is refused (``check_bind``).
* Browsers log in once and get a signed session cookie (``HttpOnly; SameSite=Strict``,
  ``Secure`` over HTTPS). Scripts send ``Authorization: Bearer <token>`` (or Basic).
* Every state-changing request is refused (403) when it comes from another site
  (``Sec-Fetch-Site`` / ``Origin``) and, unless authenticated by an ``Authorization`` header,
  when it lacks the CSRF token (``X-CSRF-Token`` header or ``csrf_token`` form field) bound to
  the ``conveyor_csrf`` cookie.
* Token buckets limit requests per client on the API and on login attempts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ValidationError

SESSION_COOKIE = "conveyor_session"
CSRF_COOKIE = "conveyor_csrf"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}
MIN_TOKEN = 16
MIN_PASSWORD = 8


@dataclass(frozen=True)
class DashboardConfig:
    """Everything the dashboard needs to know about access and limits."""

    token: str | None = None
    username: str | None = None
    password: str | None = None
    read_only: bool = False
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    session_ttl: float = 12 * 3600.0
    cookie_secure: bool | None = None  # None: Secure when the request came over HTTPS
    rate_limit: float = 20.0  # API requests per second per client (sustained)
    rate_burst: int = 100
    login_per_minute: int = 10
    live_interval: float = 0.3  # seconds between live (SSE) refreshes

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < MIN_TOKEN:
            raise ValidationError("token", f"must be at least {MIN_TOKEN} characters")
        if self.password is not None and len(self.password) < MIN_PASSWORD:
            raise ValidationError("password", f"must be at least {MIN_PASSWORD} characters")
        if self.password is not None and not self.username:
            object.__setattr__(self, "username", "admin")
        if self.username is not None and self.password is None:
            raise ValidationError("password", "a username needs a password (there is no default)")

    @property
    def auth_enabled(self) -> bool:
        """True when any credential is configured."""
        return bool(self.token or self.password)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> DashboardConfig:
        """Read ``CONVEYOR_DASHBOARD_*`` variables, then apply ``overrides`` (None ignored)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in ("token", "username", "password"):
            raw = env.get(f"CONVEYOR_DASHBOARD_{name.upper()}")
            if raw:
                values[name] = raw
        if env.get("CONVEYOR_DASHBOARD_SECRET"):
            values["secret"] = env["CONVEYOR_DASHBOARD_SECRET"].encode()
        if env.get("CONVEYOR_DASHBOARD_READ_ONLY", "").lower() in ("1", "true", "yes"):
            values["read_only"] = True
        if env.get("CONVEYOR_DASHBOARD_RATE_LIMIT"):
            try:
                values["rate_limit"] = float(env["CONVEYOR_DASHBOARD_RATE_LIMIT"])
            except ValueError as exc:
                raise ValidationError("CONVEYOR_DASHBOARD_RATE_LIMIT", "must be a number") from exc
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values) if values else cls()


def is_loopback(host: str) -> bool:
    """True for localhost / 127.0.0.0/8 / ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, config: DashboardConfig) -> None:
    """Refuse to serve beyond loopback without credentials."""
    if not is_loopback(host) and not config.auth_enabled:
        raise ValidationError(
            "host",
            f"refusing to bind {host!r} without authentication: set CONVEYOR_DASHBOARD_TOKEN or "
            "CONVEYOR_DASHBOARD_USERNAME/CONVEYOR_DASHBOARD_PASSWORD (or bind 127.0.0.1)",
        )


@dataclass(frozen=True)
class Identity:
    """Who made a request: ``user`` (for the audit log) and how (``header``/``cookie``/``none``)."""

    user: str
    via: str

    @property
    def by_header(self) -> bool:
        """Authenticated by an Authorization header (immune to CSRF)."""
        return self.via == "header"


def _eq(a: str, b: str | None) -> bool:
    return b is not None and hmac.compare_digest(a.encode(), b.encode())


def authenticate(
    config: DashboardConfig, headers: Mapping[str, str], cookies: Mapping[str, str], now: float
) -> Identity | None:
    """The identity of a request, or None when auth is on and nothing valid was presented."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and config.token and _eq(value.strip(), config.token):
        return Identity("token", "header")
    if scheme.lower() == "basic" and config.password:
        try:
            user, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user = password = ""
        if config.username and _eq(user, config.username) and _eq(password, config.password):
            return Identity(user, "header")
    if auth:
        return None if config.auth_enabled else Identity("local", "none")
    session = read_session(config, cookies.get(SESSION_COOKIE, ""), now)
    if session is not None:
        return Identity(session, "cookie")
    return None if config.auth_enabled else Identity("local", "none")


def check_login(config: DashboardConfig, username: str, password: str, token: str) -> str | None:
    """The user name for valid login form credentials, else None."""
    if token and config.token and _eq(token, config.token):
        return "token"
    if (
        config.password
        and config.username
        and _eq(username, config.username)
        and _eq(password, config.password)
    ):
        return config.username
    return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_session(config: DashboardConfig, user: str, now: float) -> str:
    """A signed session cookie value for ``user``, valid ``session_ttl`` seconds."""
    body = _b64(
        json.dumps({"u": user, "exp": now + config.session_ttl, "n": secrets.token_hex(8)}).encode()
    )
    sig = _b64(hmac.new(config.secret, body.encode(), hashlib.sha256).digest())
    return f"{body}.{sig}"


def read_session(config: DashboardConfig, value: str, now: float) -> str | None:
    """The user of a valid, unexpired session cookie, else None."""
    body, _, sig = value.partition(".")
    if not body or not sig:
        return None
    expected = _b64(hmac.new(config.secret, body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(expected, sig):
        return None
    try:
        data = json.loads(_unb64(body))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(data, dict) or float(data.get("exp", 0)) < now:
        return None
    user = data.get("u")
    return user if isinstance(user, str) and user else None


def new_csrf_seed() -> str:
    """A fresh random value for the CSRF cookie."""
    return secrets.token_urlsafe(24)


def csrf_token(config: DashboardConfig, seed: str) -> str:
    """The token pages embed for a CSRF cookie value (an HMAC, so it cannot be forged)."""
    return hmac.new(config.secret, f"csrf:{seed}".encode(), hashlib.sha256).hexdigest()[:40]


def csrf_valid(config: DashboardConfig, seed: str | None, presented: str | None) -> bool:
    """True when ``presented`` is the token of the CSRF cookie ``seed``."""
    if not seed or not presented:
        return False
    return hmac.compare_digest(csrf_token(config, seed), presented)


def cross_site(headers: Mapping[str, str], scheme: str, host: str) -> bool:
    """True when the browser says the request comes from another site or origin."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = headers.get("origin")
    return bool(origin) and origin != "null" and origin != f"{scheme}://{host}"


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
