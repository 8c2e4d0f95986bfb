"""Helpers every CLI command shares: finding the app, opening it, printing job data safely.

The app is given the same way to every command: ``APP`` as the first argument, ``--app APP``,
or ``CONVEYOR_APP`` (in that order of precedence); without one, a bare app on ``--url`` /
``CONVEYOR_URL`` (default ``sqlite:///conveyor.db``). Commands that read or act on an existing
system never create a SQLite file: a missing database is a clear error.

rich loads on first use (``console`` is created by the module ``__getattr__``): ``conveyor
worker`` only parses options and checks the app before it execs the worker, and never prints.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
import orjson

from ..errors import BrokerUnavailable, ConveyorError
from .render import Col, literal, print_table

if TYPE_CHECKING:
    from rich.console import Console

    from ..app import Conveyor

    console: Console

APP_ENV = "CONVEYOR_APP"
DEFAULT_URL = "sqlite:///conveyor.db"
_APP_SPEC = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\Z")


def get_console() -> Console:
    """The shared rich console (emoji codes and highlighting off), created on first use."""
    value = globals().get("console")
    if value is None:
        from rich.console import Console

        globals()["console"] = value = Console(emoji=False, highlight=False)
    return value


def __getattr__(name: str) -> Any:
    """``from .common import console`` creates the console on first use (PEP 562)."""
    if name == "console":
        return get_console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def say(message: str, style: str = "") -> None:
    """Print one line built from job data literally (no markup, no emoji, escapes shown)."""
    from rich.text import Text

    get_console().print(Text(literal(message, None), style=style))


# ---------------------------------------------------------------------- the app
def looks_like_app(value: str) -> bool:
    """``module.path:attribute`` whose module can be found (so ``sched:a:1`` is an id)."""
    if not _APP_SPEC.match(value):
        return False
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(value.partition(":")[0]) is not None
    except (ImportError, ValueError):
        return False


def load_app(target: str) -> Conveyor:
    """Import ``module:attribute`` and return the Conveyor app it names; any failure of the
    module (syntax error, import error, exception at import) is one clear line."""
    from ..app import Conveyor

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"{target!r} must be module:attribute, e.g. myproj.jobs:app", param_hint="APP"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ConveyorError as exc:  # e.g. the app's broker URL is refused
        raise click.UsageError(f"{target}: {exc}") from exc
    except SyntaxError as exc:
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else module_name
        raise click.BadParameter(
            f"cannot import {module_name!r}: SyntaxError: {exc.msg} ({where})", param_hint="APP"
        ) from exc
    except Exception as exc:  # an error raised by the user's module while it imports
        raise click.BadParameter(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}", param_hint="APP"
        ) from exc
    app = getattr(module, attr, None)
    if not isinstance(app, Conveyor):
        raise click.BadParameter(f"{target!r} is not a Conveyor app", param_hint="APP")
    return app


def require_app(app_target: str | None, command: str) -> str:
    """The app of a command that cannot run without one (``worker``, ``scheduler``)."""
    if not app_target:
        raise click.UsageError(
            f"give your app: conveyor {command} myproj.jobs:app (or --app, or {APP_ENV})"
        )
    return app_target


def sqlite_path(url: str) -> str | None:
    """The absolute file path of a ``sqlite:///`` URL (None for other schemes)."""
    if not url.lower().startswith("sqlite://"):
        return None
    rest = url.split("://", 1)[1].partition("?")[0]
    from urllib.parse import unquote

    return os.path.abspath(unquote(rest[1:])) if rest.startswith("/") else None


def unreachable(exc: BrokerUnavailable) -> click.ClickException:
    """The error of a broker that cannot be reached: ONE line (psycopg adds a hint line),
    exit code 1, the same for every one-shot command and backend (docs/monitoring.md)."""
    return click.ClickException(literal(" ".join(str(exc).split()), None))


def missing_database(path: str) -> click.UsageError:
    """The error of a read command pointed at a SQLite file that does not exist."""
    return click.UsageError(
        f"no SQLite database at {path}: give your app (APP, --app or {APP_ENV}) or --url, "
        "or run from your project's directory (nothing was created)"
    )


def open_app(app_target: str | None, url: str | None, *, create: bool = False) -> Conveyor:
    """The app named by APP / ``--app`` / CONVEYOR_APP, else a bare app on ``--url``.

    Unless ``create``, a SQLite database that does not exist yet is an error, never created.
    """
    from ..app import Conveyor
    from ..broker.sqlite_store import MUST_EXIST

    token = MUST_EXIST.set(not create)
    try:
        if app_target:
            return load_app(app_target)
        resolved = url or os.environ.get("CONVEYOR_URL") or DEFAULT_URL
        path = sqlite_path(resolved)
        if path is not None and not create and not os.path.exists(path):
            raise missing_database(path)
        try:
            return Conveyor(resolved)
        except BrokerUnavailable as exc:  # PostgreSQL connects here: not a usage error
            raise unreachable(exc) from exc
        except ConveyorError as exc:
            raise click.UsageError(str(exc)) from exc
    finally:
        MUST_EXIST.reset(token)


class AppCommand(click.Command):
    """A command that also takes its app as the first positional argument (``[APP]``).

    When the command got more positionals than it declares, the first one that reads
    ``module:attribute`` with an importable module (else the first) is the app, wherever it
    stands (``job APP ID`` and ``job ID APP`` both work); for commands taking any number
    (``dlq requeue [APP] ID...``) only a leading importable ``module:attribute`` is. It becomes
    ``--app`` (which beats ``CONVEYOR_APP``); APP together with ``--app`` is refused.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("options_metavar", "[APP] [OPTIONS]")
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Move a positional APP into ``--app``, then parse as usual."""
        return super().parse_args(ctx, self._promote_app(ctx, list(args)))

    def _positionals(self, args: list[str]) -> list[int]:
        """Indexes of the positional tokens of ``args`` (not options, not option values)."""
        takes_value = {
            name
            for p in self.params
            if isinstance(p, click.Option) and not p.is_flag and not p.count
            for name in p.opts
        }
        out: list[int] = []
        i = 0
        while i < len(args):
            token = args[i]
            if token == "--":
                out.extend(range(i + 1, len(args)))
                break
            if token.startswith("-") and token != "-":
                i += 2 if token in takes_value else 1
                continue
            out.append(i)
            i += 1
        return out

    def _promote_app(self, ctx: click.Context, args: list[str]) -> list[str]:
        if any(a in ctx.help_option_names for a in args):
            return args
        arguments = [p for p in self.params if isinstance(p, click.Argument)]
        declared = sum(max(p.nargs, 0) for p in arguments)
        variadic = any(p.nargs < 0 for p in arguments)
        found = self._positionals(args)
        if not found:
            return args
        apps = [i for i in found if looks_like_app(args[i])]
        if variadic:
            if not apps or apps[0] != found[0]:
                return args
        elif len(found) <= declared:
            return args
        index = apps[0] if apps else found[0]
        if any(a == "--app" or a.startswith("--app=") for a in args):
            raise click.UsageError("the app is given twice: as APP and as --app", ctx=ctx)
        return ["--app", args[index], *args[:index], *args[index + 1 :]]


class Finite(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN and infinity (click lets both through its
    bounds: ``--max-memory-per-child nan`` crashed the worker, ``--interval inf`` slept for
    ever); the usage error names the option, exit 2."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The number within the range, else a usage error (NaN and infinity named as such,
        before the range check)."""
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def setting_default(name: str) -> Any:
    """The default of ``Settings.<name>`` read from the class (help texts never hard-code it)."""
    from ..config import Settings

    fields = getattr(Settings, "model_fields", None)  # pydantic-settings
    if isinstance(fields, dict) and name in fields:
        return fields[name].default
    import dataclasses

    return {f.name: f.default for f in dataclasses.fields(Settings)}[name]


_SECRET_PARAM = re.compile(r"((?:^|[?&\s])(?:sentinel_)?password\s*=\s*)('[^']*'|[^&#\s]+)", re.I)


def redacted_url(url: str) -> str:
    """``url`` fit for a log or a terminal: the password of its user part and any
    ``password=`` / ``sentinel_password=`` option shown as ``***`` (Celery's banner does so)."""
    scheme, sep, rest = url.partition("://")
    if sep:
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        userinfo, at, hosts = rest[:end].rpartition("@")
        if at and ":" in userinfo:
            rest = f"{userinfo.split(':', 1)[0]}:***@{hosts}{rest[end:]}"
        url = f"{scheme}{sep}{rest}"
    return _SECRET_PARAM.sub(lambda m: m.group(1) + "***", url)


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON for scripts."""
    try:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str).decode()
    except orjson.JSONEncodeError:  # a job's deepest result, one level too deep with its job
        import json

        text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
    click.echo(text)


def table(title: str, columns: Sequence[str | Col], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table of (possibly hostile) values fitted to the terminal (``render``)."""
    print_table(get_console(), title, columns, rows)


app_option = click.option(
    "--app",
    "app_target",
    default=None,
    envvar=APP_ENV,
    metavar="APP",
    help=f"module:attribute of your Conveyor app (also as the first argument, or {APP_ENV}).",
)
url_option = click.option(
    "--url",
    default=None,
    envvar="CONVEYOR_URL",
    help="Broker URL when no app is given (default: CONVEYOR_URL or sqlite:///conveyor.db).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
