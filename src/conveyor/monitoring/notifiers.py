"""Alert notifiers: where a firing or resolved alert is told (a log line, a webhook POST).

``AlertManager`` (``alerts.py``) calls ``notify(payload)`` on each; a notifier returns whether
the message was delivered, and never raises (a failing webhook is logged, with its URL's
secret parts left out).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..errors import ValidationError

log = logging.getLogger("conveyor.alerts")  # the alerts' logger, as before the split


class Notifier(Protocol):
    """Anything that can deliver an alert notification (a JSON-ready dict)."""

    def notify(self, payload: Mapping[str, Any]) -> bool:
        """Deliver one notification; True on success."""
        ...


class LogNotifier:
    """Writes notifications to the ``conveyor.alerts`` logger (firing: WARNING)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or log

    def notify(self, payload: Mapping[str, Any]) -> bool:
        """Log one line."""
        level = logging.WARNING if payload.get("state") == "firing" else logging.INFO
        self.logger.log(
            level,
            "alert %s %s: %s",
            payload.get("alert"),
            payload.get("state"),
            payload.get("message"),
        )
        return True


def _port(parts: urllib.parse.SplitResult) -> str:
    """``:port`` of a URL's parts, "" without one (or with an unreadable one)."""
    try:
        return f":{parts.port}" if parts.port else ""
    except ValueError:
        return ""


class WebhookNotifier:
    """POSTs each notification as JSON to ``url``, retrying with backoff on errors and 5xx."""

    def __init__(
        self,
        url: str,
        *,
        retries: int = 3,
        backoff: float = 0.5,
        timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValidationError("webhook", f"{url!r} must be an http:// or https:// URL")
        self.url = url
        # a webhook URL often carries its secret in the path (Slack, Teams) or the query: a
        # log line names only the receiver
        parts = urllib.parse.urlsplit(url)
        tail = "/…" if parts.path.strip("/") or parts.query else "/"
        self.shown_url = f"{parts.scheme}://{parts.hostname or ''}{_port(parts)}{tail}"
        self.retries = max(0, retries)
        self.backoff = backoff
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.sleep = sleep

    def notify(self, payload: Mapping[str, Any]) -> bool:
        """POST with up to ``retries`` retries; False (and a logged error) when all fail."""
        body = json.dumps(dict(payload), default=str).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "conveyor-alerts",
            **self.headers,
        }
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, body, headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    if response.status < 300:
                        return True
                    reason = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                reason = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code != 429:
                    break  # the receiver refused it: retrying will not help
            except (urllib.error.URLError, OSError) as exc:
                reason = str(exc)
            if attempt < self.retries:
                self.sleep(self.backoff * 2**attempt)
        log.error(
            "webhook %s failed for alert %s: %s", self.shown_url, payload.get("alert"), reason
        )
        return False
