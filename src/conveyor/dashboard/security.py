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
* Token buckets (``hardening.RateLimiter``) limit requests per client on the API and on login
  attempts; the numeric limits are checked where they are set (no NaN, no zero burst).
* Host headers, body sizes, forwarded headers and server-side sessions: ``hardening``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import math
import os
import re
import secrets
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.job import MAX_DELAY, too_long
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
MAX_BODY = 64 * 1024  # forms and log-in: a few fields
MAX_API_BODY = 2 * 1024 * 1024  # API JSON: a 1 MiB payload (the enqueue cap) plus its envelope
_HOST_RE = re.compile(r"\*|(\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\]")


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
    # Host header names accepted besides the bound address (``*.example.com``, ``*`` for any).
    allowed_hosts: tuple[str, ...] = ()
    # Proxies whose X-Forwarded-For / -Proto are trusted (IPs, networks or ``*``); none by default.
    forwarded_allow_ips: tuple[str, ...] = ()
    max_body: int = MAX_BODY  # bytes a page form or the log-in may send (413 beyond)
    max_api_body: int = MAX_API_BODY  # bytes an /api/ request may send (413 beyond)
    # The app that mounts the dashboard authenticates every request before it gets here
    # (Django staff login, a FastAPI dependency): no credentials needed beyond loopback.
    external_auth: bool = False

    def __post_init__(self) -> None:
        _check_secret("token", self.token, MIN_TOKEN)
        _check_secret("password", self.password, MIN_PASSWORD)
        name = self.username
        if name is not None and (not name.strip() or name != name.strip()):
            raise ValidationError("username", "must not be blank or start/end with whitespace")
        if self.password is not None and not self.username:
            object.__setattr__(self, "username", "admin")
        if self.username is not None and self.password is None:
            raise ValidationError("password", "a username needs a password (there is no default)")
        object.__setattr__(self, "allowed_hosts", tuple(_host_name(h) for h in self.allowed_hosts))
        object.__setattr__(
            self, "forwarded_allow_ips", tuple(_proxy(p) for p in self.forwarded_allow_ips)
        )
        for name in ("max_body", "max_api_body"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
                raise ValidationError(name, "must be an integer of at least 1024 bytes")
        _check_limits(self)

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
            var = f"CONVEYOR_DASHBOARD_{name.upper()}"
            raw = env.get(var)
            if raw and not raw.strip():  # set but blank: a mistake, never "no credentials"
                raise ValidationError(
                    var, "is blank (whitespace only): set a real value or unset it"
                )
            if raw:
                values[name] = raw
        for name in ("allowed_hosts", "forwarded_allow_ips"):
            raw = env.get(f"CONVEYOR_DASHBOARD_{name.upper()}", "")
            if raw.strip():
                values[name] = split_list(raw)
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
        try:
            return replace(cls(), **values) if values else cls()
        except ValidationError as exc:  # name the variable the value came from
            var = f"CONVEYOR_DASHBOARD_{exc.field.upper()}"
            if exc.field in overrides or var not in env:
                raise
            raise ValidationError(var, exc.rule) from exc


#: Numeric settings and their lowest value: a NaN ``session_ttl`` made sessions last for ever,
#: ``login_per_minute=0`` turned the log-in limit off, ``live_interval=0`` spun every stream.
_LIMITS = {"session_ttl": 1.0, "rate_limit": 0.0, "live_interval": 0.05}
_COUNTS = ("rate_burst", "login_per_minute")
_DURATIONS = ("session_ttl", "live_interval")  # at most MAX_DELAY, as every duration


def _check_limits(config: DashboardConfig) -> None:
    for name, low in _LIMITS.items():
        value = getattr(config, name)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < low:
            raise ValidationError(name, f"must be a finite number of at least {low:g}")
        if name in _DURATIONS and value > MAX_DELAY:
            raise ValidationError(name, too_long(value))
    for name in _COUNTS:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValidationError(name, "must be a whole number of at least 1")


def split_list(raw: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``: comma-separated settings."""
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _check_secret(name: str, value: str | None, minimum: int) -> None:
    """A token or password: no blank value, no padding, ``minimum`` real characters."""
    if value is None:
        return
    if not value.strip():
        raise ValidationError(name, "must not be blank (whitespace only)")
    if value != value.strip():
        raise ValidationError(name, "must not start or end with whitespace")
    if len(value) < minimum:
        raise ValidationError(name, f"must be at least {minimum} characters")


def _host_name(value: str) -> str:
    """An allowed Host name, port dropped (``name``, ``*.domain``, ``*``, IP or ``[IPv6]``)."""
    text = str(value).strip().lower()
    if text.count(":") == 1:  # name:port or IPv4:port
        text = text.partition(":")[0]
    elif ":" in text and not text.startswith("["):
        text = f"[{text}]"  # bare IPv6
    elif text.startswith("[") and "]:" in text:
        text = text.partition("]:")[0] + "]"
    if not _HOST_RE.fullmatch(text):
        raise ValidationError(
            "allowed_hosts", f"{str(value)[:80]!r} is not a host name, '*.domain', '*' or an IP"
        )
    return text.rstrip(".")


def _proxy(value: str) -> str:
    """A trusted proxy: an IP address, a network (``10.0.0.0/8``) or ``*``."""
    text = str(value).strip()
    if text == "*":
        return text
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError as exc:
        raise ValidationError(
            "forwarded_allow_ips", f"{text[:80]!r} is not an IP address, a network or '*'"
        ) from exc
    return text


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


#: ASGI scope key an outer app that authenticates for the dashboard (``external_auth``) sets
#: to its user's name; Starlette's ``AuthenticationMiddleware`` ``scope["user"]`` counts too.
EXTERNAL_USER = "conveyor.external_user"
_ACTOR_MAX = 150  # Django's username length
_NOT_IN_A_NAME = ("Cc", "Cf", "Cs", "Zl", "Zp")


def actor_name(name: str) -> str:
    """A user name fit for the audit log: control and format characters (escapes, bidi
    overrides), lone surrogates (no store can encode them) and line / paragraph separators
    removed, at most 150 characters; HTML escaping is the page's job."""
    kept = "".join(ch for ch in name if unicodedata.category(ch) not in _NOT_IN_A_NAME)
    return kept[:_ACTOR_MAX].strip() or "anonymous"


def external_identity(config: DashboardConfig, scope: Mapping[str, Any]) -> Identity | None:
    """The user the mounting app authenticated (``external_auth`` only), else None."""
    if not config.external_auth:
        return None
    name = scope.get(EXTERNAL_USER)
    user = scope.get("user")  # Starlette AuthenticationMiddleware
    if not isinstance(name, str) and getattr(user, "is_authenticated", False):
        name = str(getattr(user, "display_name", "") or "")
    return Identity(actor_name(name), "external") if isinstance(name, str) and name else None


def _eq(a: str, b: str | None) -> bool:
    return b is not None and hmac.compare_digest(a.encode(), b.encode())


def authenticate(
    config: DashboardConfig,
    headers: Mapping[str, str],
    cookies: Mapping[str, str],
    now: float,
    alive: Callable[[str], bool] = lambda sid: True,
) -> Identity | None:
    """The identity of a request, or None when auth is on and nothing valid was presented.

    ``alive(session_id)`` says whether the server still knows a session (logout ends it).
    """
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
    if session is not None and alive(session[1]):
        return Identity(session[0], "cookie")
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


def new_session_id() -> str:
    """A fresh random session id (the server-side record's name)."""
    return secrets.token_hex(16)


def make_session(config: DashboardConfig, user: str, now: float, sid: str) -> str:
    """A signed session cookie value for ``user`` and session ``sid``, valid ``session_ttl``."""
    body = _b64(json.dumps({"u": user, "exp": now + config.session_ttl, "n": sid}).encode())
    sig = _b64(hmac.new(config.secret, body.encode(), hashlib.sha256).digest())
    return f"{body}.{sig}"


def read_session(config: DashboardConfig, value: str, now: float) -> tuple[str, str] | None:
    """``(user, session id)`` of a validly signed, unexpired session cookie, else None."""
    body, _, sig = value.partition(".")
    if not body or not sig:
        return None
    expected = _b64(hmac.new(config.secret, body.encode(errors="replace"), hashlib.sha256).digest())
    if not _same(expected, sig):
        return None
    try:
        data = json.loads(_unb64(body))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(data, dict) or float(data.get("exp", 0)) < now:
        return None
    user, sid = data.get("u"), data.get("n")
    if isinstance(user, str) and user and isinstance(sid, str) and sid:
        return user, sid
    return None


def new_csrf_seed() -> str:
    """A fresh random value for the CSRF cookie."""
    return secrets.token_urlsafe(24)


def csrf_token(config: DashboardConfig, seed: str) -> str:
    """The token pages embed for a CSRF cookie value (an HMAC, so it cannot be forged)."""
    message = f"csrf:{seed}".encode(errors="replace")
    return hmac.new(config.secret, message, hashlib.sha256).hexdigest()[:40]


def csrf_valid(config: DashboardConfig, seed: str | None, presented: str | None) -> bool:
    """True when ``presented`` is the token of the CSRF cookie ``seed``."""
    if not seed or not presented:
        return False
    return _same(csrf_token(config, seed), presented)


def _same(expected: str, presented: str) -> bool:
    """Constant-time equality of a computed secret and what a client sent, whatever it sent:
    ``compare_digest`` raises TypeError on non-ASCII text (a 500 for a crafted token)."""
    return hmac.compare_digest(expected.encode(), presented.encode(errors="replace"))


def cross_site(headers: Mapping[str, str], scheme: str, host: str) -> bool:
    """True when the browser says the request comes from another site or origin."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = headers.get("origin")
    return bool(origin) and origin != "null" and origin != f"{scheme}://{host}"
