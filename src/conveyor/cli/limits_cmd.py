"""``conveyor limits [show|set|clear]``: flow control from a terminal (issue 15).

``show`` lists the declared limits, run-time overrides, tokens left, running jobs per key and
waiting jobs per group with why they wait; ``set`` / ``clear`` change a limit for every worker
at its next claim, without a restart (monitoring/limits.py).
"""

from __future__ import annotations

from typing import Any

import click

from ..errors import ValidationError
from .common import AppCommand, app_option, emit_json, json_option, open_app, say, table, url_option
from .ops import friendly_errors
from .render import literal


@click.group("limits", invoke_without_command=True)
@click.pass_context
def limits_group(ctx: click.Context) -> None:
    """Rate limits, concurrency limits and fair groups: show them, change them at run time."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(limits_show)


@limits_group.command("show", cls=AppCommand)
@app_option
@url_option
@json_option
@friendly_errors
def limits_show(
    app_target: str | None = None, url: str | None = None, as_json: bool = False
) -> None:
    """Declared limits, overrides, tokens, running per key, waiting per group."""
    from ..monitoring.limits import limits

    data = limits(open_app(app_target, url).runtime)
    if as_json:
        emit_json(data)
        return
    show(data)


def show(data: dict[str, Any]) -> None:
    """Print a ``limits()`` result as tables."""
    overrides = data["limits"]
    names = sorted(set(data["declared"]) | set(overrides))
    table(
        "Limits",
        ["limiter", "declared", "override"],
        [[n, data["declared"].get(n, ""), _spec(overrides.get(n))] for n in names],
    )
    if data["buckets"]:
        table("Tokens", ["bucket", "tokens"], [[n, t] for n, t in data["buckets"].items()])
    if data["running"]:
        table("Running", ["slot", "jobs"], [[n, len(ids)] for n, ids in data["running"].items()])
    if data["groups"]:
        rows = [[g["queue"], g["group"], g["waiting"], g["why"] or ""] for g in data["groups"]]
        table("Waiting", ["queue", "group", "waiting", "why"], rows)


def _spec(spec: list[float] | None) -> str:
    if not spec:
        return ""
    if len(spec) == 1:
        return f"{spec[0]:g} running"
    return f"{spec[0]:g} per {spec[1]:g}s (burst {spec[2]:g})"


@limits_group.command("set", cls=AppCommand)
@click.argument("name")
@click.argument("value")
@click.option("--burst", type=float, default=None, help="Rate limits: tokens a bucket holds.")
@app_option
@url_option
@friendly_errors
def limits_set(
    name: str, value: str, burst: float | None, app_target: str | None, url: str | None
) -> None:
    """Override a limit: NAME rate:<task> VALUE 10/s, or NAME conc:<task> VALUE 2."""
    app = open_app(app_target, url)
    try:
        app.set_limit(name, value, burst)
    except ValidationError as exc:
        if exc.field != "limit":
            raise
        # The API calls it "limit"; here it is the VALUE argument (no option is named limit).
        raise click.BadParameter(literal(exc.rule, None), param_hint="'VALUE'") from exc
    say(f"{name} set to {value}")


@limits_group.command("clear", cls=AppCommand)
@click.argument("name")
@app_option
@url_option
@friendly_errors
def limits_clear(name: str, app_target: str | None, url: str | None) -> None:
    """Drop an override: the declared limit applies again."""
    open_app(app_target, url).set_limit(name, None)
    say(f"{name}: override cleared")


def register(group: click.Group) -> None:
    """Add ``conveyor limits`` to the CLI (cli/main.py loads this module on demand)."""
    group.add_command(limits_group)
