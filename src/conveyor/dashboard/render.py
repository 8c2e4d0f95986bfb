"""Template rendering: one Jinja2 environment with autoescaping and the display filters.

Every value from a job (args, results, errors, names) reaches HTML through autoescaping, and
long strings are truncated (``short``, ``pretty``) so a huge argument cannot flood a page.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from ..core.escapes import escape_invisible
from ..monitoring.inspect import preview_args
from .charts import chart_model

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
MAX_PRETTY = 20_000


def _utc(value: Any) -> time.struct_time | None:
    """Epoch seconds as a UTC struct_time; None for non-numbers and times out of range."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None
    try:
        return time.gmtime(value)
    except (OverflowError, OSError, ValueError):
        return None


def ts(value: Any) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SS`` UTC; empty for None."""
    utc = _utc(value)
    return "" if utc is None else time.strftime("%Y-%m-%d %H:%M:%S", utc)


def when(value: Any) -> Markup:
    """A timestamp as ``<time>`` in UTC; ``static/dashboard.js`` rewrites it to the browser's
    time zone when the operator picks "Local" (remembered in localStorage)."""
    utc = _utc(value)
    if utc is None:
        return Markup("")
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", utc)
    text = time.strftime("%Y-%m-%d %H:%M:%S", utc)
    return Markup('<time class="ts" datetime="{}" data-ts="{}">{}</time>').format(
        iso, repr(float(value)), text
    )


def ago(seconds: Any) -> str:
    """A duration in seconds as ``45s``, ``3m``, ``2h``, ``4d``; ``—`` for None."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "—"
    s = max(0.0, float(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit}"
    return f"{s:.0f}s"


def dur(seconds: Any) -> str:
    """A short duration: ``12 ms``, ``1.20 s``; ``—`` for None."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "—"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def pct(rate: Any) -> str:
    """A 0..1 rate as a percentage; ``—`` for None."""
    if not isinstance(rate, int | float) or isinstance(rate, bool):
        return "—"
    return f"{rate * 100:.1f}%"


def short(value: Any, limit: int = 120) -> str:
    """``str(value)`` cut to ``limit`` characters with an ellipsis."""
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any, limit: int = MAX_PRETTY) -> str:
    """Indented JSON (non-JSON types as strings), truncated to ``limit`` characters."""
    try:
        text = orjson.dumps(
            value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str
        ).decode()
    except TypeError:
        text = repr(value)
    if len(text) > limit:
        return text[:limit] + f"\n… ({len(text) - limit} more characters not shown)"
    return text


#: Shown as escapes on a page, as the CLI and the text logs show them
#: (``conveyor.core.escapes``): control (but newline and tab) and format characters — bidi
#: overrides, zero-width marks — lone surrogates and line or paragraph separators. The
#: zero-width joiner stays: emoji sequences are built with it.
_KEEP = frozenset("\n\t\u200d")


def visible(value: Any) -> Any:
    """Every ``{{ value }}`` a template prints (the environment's ``finalize``): a string's
    invisible characters as escapes (``\\u202e``), so no job data reorders or hides text
    around it; Markup (built by the dashboard) and non-strings as they are."""
    if not isinstance(value, str) or isinstance(value, Markup):
        return value
    return escape_invisible(value, _KEEP)


def keep(value: Any) -> Markup:
    """A form field's value exactly as stored (HTML-escaped, invisible characters kept): the
    id or name a checkbox or hidden field posts back must be the real one, not its display."""
    return escape("" if value is None else value)


def seg(value: Any) -> str:
    """A value quoted as ONE URL path segment (``/`` -> ``%2F``): ids may hold ``/`` and ``..``."""
    return quote("" if value is None else str(value), safe="")


def build_environment() -> Environment:
    """The Jinja2 environment (autoescape on for every template)."""
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=visible,
    )
    env.filters["chart"] = chart_model  # processed/failed series -> SVG geometry (charts.py)
    env.filters.update(
        ts=ts,
        when=when,
        ago=ago,
        dur=dur,
        pct=pct,
        short=short,
        pretty=pretty,
        argprev=preview_args,
        seg=seg,
        keep=keep,
    )
    return env


class Renderer:
    """Renders whole pages and fragments (for htmx swaps and SSE)."""

    def __init__(self) -> None:
        self.env = build_environment()

    def render(self, name: str, **context: Any) -> str:
        """Render template ``name`` with ``context``."""
        return self.env.get_template(name).render(**context)
