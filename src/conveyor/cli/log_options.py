"""``--log-format`` / ``--log-level`` for the long-running commands (scheduler, dashboard).

One decorator: the options are handled by a callback that calls ``configure_logging`` (so the
command functions do not change), formatting Conveyor's loggers and the user's alike. ``conveyor
worker`` declares its own (it also passes them to its worker processes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..worker.logs import FORMATS, configure_logging

F = TypeVar("F", bound=Callable[..., Any])
LEVELS = ("debug", "info", "warning", "error")


def _apply(ctx: click.Context, param: click.Parameter, value: str) -> None:
    ctx.meta[f"conveyor_{param.name}"] = value
    fmt = ctx.meta.get("conveyor_log_format", "text")
    level = ctx.meta.get("conveyor_log_level", "info")
    configure_logging(fmt, level.upper())


def log_options(fn: F) -> F:
    """Add ``--log-format`` and ``--log-level`` to a command (both applied before it runs)."""
    fn = click.option(
        "--log-level",
        type=click.Choice(LEVELS),
        default="info",
        show_default=True,
        expose_value=False,
        callback=_apply,
        help="Threshold for Conveyor's and the app's loggers.",
    )(fn)
    return click.option(
        "--log-format",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        expose_value=False,
        is_eager=True,
        callback=_apply,
        help="text for people, json (one object per line) for log pipelines.",
    )(fn)
