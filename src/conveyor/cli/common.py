"""Helpers every CLI command shares: loading ``APP``, opening an app from ``--url``, output.

rich loads on first use (``console`` is created by the module ``__getattr__``): ``conveyor
worker`` only parses options and checks the app before it execs the worker, and never prints.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
import orjson

from ..app import Conveyor
from ..errors import ConveyorError

if TYPE_CHECKING:
    from rich.console import Console

    console: Console


def get_console() -> Console:
    """The shared rich console, created (and rich imported) on first use."""
    value = globals().get("console")
    if value is None:
        from rich.console import Console

        globals()["console"] = value = Console()
    return value


def __getattr__(name: str) -> Any:
    """``from .common import console`` creates the console on first use (PEP 562)."""
    if name == "console":
        return get_console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_app(target: str) -> Conveyor:
    """Import ``module:attribute`` and return the Conveyor app it names."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"{target!r} must be module:attribute, e.g. myproj.jobs:app", param_hint="APP"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from exc
    app = getattr(module, attr, None)
    if not isinstance(app, Conveyor):
        raise click.BadParameter(f"{target!r} is not a Conveyor app", param_hint="APP")
    return app


def open_app(app_target: str | None, url: str | None) -> Conveyor:
    """The app named by ``--app`` if given, else a bare app on ``--url`` / CONVEYOR_URL."""
    if app_target:
        return load_app(app_target)
    try:
        return Conveyor(url)
    except ConveyorError as exc:
        raise click.UsageError(str(exc)) from exc


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON for scripts."""
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str).decode())


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a rich table."""
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    get_console().print(t)


app_option = click.option(
    "--app",
    "app_target",
    default=None,
    metavar="APP",
    help="module:attribute of your Conveyor app.",
)
url_option = click.option(
    "--url",
    default=None,
    envvar="CONVEYOR_URL",
    help="Broker URL (default: CONVEYOR_URL or sqlite:///conveyor.db).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
