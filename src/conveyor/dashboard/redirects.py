"""Where the dashboard sends a browser: URLs under the mount prefix, and the way back after an
action.

``at_root`` puts a dashboard path under the ASGI ``root_path``; ``back`` picks where an action
returns to (the form's ``next``, else the page the request came from) and ``safe_target`` makes
sure that is a same-origin path inside this dashboard, so no redirect is ever an open one;
``done`` answers an HTML action with that redirect and a flash message, signed (``flash_sig``)
so that a page shows only the dashboard's own messages (``flash_of``), never a crafted link's.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .hardening import root_of

if TYPE_CHECKING:
    from .security import DashboardConfig


def at_root(request: Request, path: str) -> str:
    """A dashboard path (``/dead``) as a URL path under the mount prefix (``/admin/jobs/dead``)."""
    return root_of(request.scope) + path


def safe_target(request: Request, target: Any) -> str | None:
    """``target`` as a path (with query) inside this dashboard, or None when it is not one.

    Accepts a path (``/admin/jobs/dead?page=2``) or a full URL of this very origin (a
    ``Referer``); refuses other hosts, scheme-relative ``//host`` and backslash tricks, and
    paths outside the mount prefix, so a redirect can never leave the dashboard.
    """
    if not isinstance(target, str) or not target or len(target) > 4000:
        return None
    if any(ord(c) < 32 for c in target) or "\\" in target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        origin = f"{request.url.scheme}://{request.url.netloc}"
        if f"{parts.scheme}://{parts.netloc}" != origin:
            return None
    path = parts.path
    if not path.startswith("/") or path.startswith("//"):
        return None
    root = root_of(request.scope)
    if root and not (path == root or path.startswith(root + "/")):
        return None
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in ("flash", FLASH_SIG)])
    return path + ("?" + query if query else "")


def back(request: Request, data: Mapping[str, Any], default: str, avoid: str = "") -> str:
    """Where an action returns to: the form's ``next``, else the page the request came from
    (htmx's ``HX-Current-URL`` or the ``Referer``), else ``default`` (a dashboard path).
    Only same-origin paths inside the dashboard qualify (``safe_target``); ``avoid`` (a page
    the action made vanish, e.g. a deleted job's) is skipped."""
    for candidate in (
        data.get("next"),
        request.headers.get("hx-current-url"),
        request.headers.get("referer"),
    ):
        target = safe_target(request, candidate)
        if target is not None and (not avoid or target.partition("?")[0] != avoid):
            return target
    return at_root(request, default)


def done(request: Request, target: str, flash: str = "") -> Response:
    """After an HTML action: htmx gets ``HX-Redirect``, plain forms a 303 redirect.

    ``target`` is a URL path under the mount prefix (``back`` or ``at_root`` build it)."""
    if flash:  # signed: only the dashboard's own messages are shown (security.flash_of)
        sig = flash_sig(request.app.state.dashboard.config, flash)
        target += ("&" if "?" in target else "?") + f"flash={quote(flash)}&{FLASH_SIG}={sig}"
    url = target
    if request.headers.get("hx-request"):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


FLASH_SIG = "fs"  # query parameter next to ``flash`` holding its signature


def flash_sig(config: DashboardConfig, text: str) -> str:
    """The signature of a flash message the dashboard itself wrote (``redirects.done``): a
    ``?flash=`` from a crafted link has none, so no link can make a page say anything."""
    digest = hmac.new(config.secret, f"flash:{text}".encode(errors="replace"), hashlib.sha256)
    return digest.hexdigest()[:32]


def flash_of(config: DashboardConfig, query: Mapping[str, str]) -> str:
    """The flash message of a request's query when its signature is valid, else ``""``."""
    text, sig = query.get("flash", ""), query.get(FLASH_SIG, "")
    expected = flash_sig(config, text).encode()
    if not text or not hmac.compare_digest(expected, sig.encode(errors="replace")):
        return ""
    return text
