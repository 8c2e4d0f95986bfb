"""``conveyor scheduler APP`` (the tick loop) and ``conveyor schedules list|next|history|pause|
resume|remove`` (inspect and manage the schedules stored in the broker)."""

from __future__ import annotations

import signal
from datetime import datetime
from types import FrameType
from typing import Any
from zoneinfo import ZoneInfo

import click

from ..app import Conveyor
from ..core.job import MAX_DELAY
from ..errors import BrokerConfigError, ValidationError
from ..scheduler.models import Schedule, ScheduleNotFound
from .common import (
    AppCommand,
    Finite,
    app_option,
    emit_json,
    json_option,
    load_app,
    open_app,
    redacted_url,
    require_app,
    say,
    table,
    url_option,
)
from .log_options import log_options
from .ops import friendly_errors
from .render import Col, literal


def _when(ts: float | None, tz: str = "UTC") -> str:
    """An epoch time as a short wall-clock time in ``tz`` with its abbreviation (None: empty)."""
    if ts is None:
        return ""
    try:
        return datetime.fromtimestamp(ts, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")
    except (ValueError, OverflowError, OSError, TypeError):  # past year 9999, not a number
        return f"{ts!r} (out of range)"


def _iso(ts: float, tz: str) -> str:
    try:
        return datetime.fromtimestamp(ts, ZoneInfo(tz)).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError, TypeError):
        return f"{ts!r} (out of range)"


def _iso_utc(ts: float | None) -> str | None:
    return None if ts is None else _iso(ts, "UTC")


def _app(app_target: str | None, url: str | None) -> Conveyor:
    return open_app(app_target, url)


def _get(app: Conveyor, name: str) -> Schedule:
    try:
        return app.schedules.get(name)
    except ScheduleNotFound as exc:
        raise click.ClickException(literal(str(exc), None)) from exc


@click.command("scheduler", cls=AppCommand)
@app_option
@click.option(
    "--interval",
    type=Finite(min=0.01, max=MAX_DELAY),
    default=0.5,
    show_default=True,
    help="Seconds between passes (sooner when a schedule is due).",
)
@click.option("--no-sync", is_flag=True, help="Do not upsert the schedules declared in APP.")
@log_options
def scheduler_command(app_target: str | None, interval: float, no_sync: bool) -> None:
    """Run the scheduler of APP (module:attribute): fire schedules, promote due delayed jobs,
    reap expired leases. Run as many as you like: each tick is enqueued exactly once."""
    app = load_app(require_app(app_target, "scheduler"))
    scheduler = app.scheduler(interval=interval, sync=not no_sync)

    def stop(signum: int, frame: FrameType | None) -> None:
        scheduler.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    say(f"conveyor scheduler {scheduler.id} on {redacted_url(app.broker.url or 'broker')}")
    try:
        scheduler.run()
    except BrokerConfigError as exc:
        raise click.ClickException(literal(str(exc), None)) from exc


@click.group("schedules")
def schedules_group() -> None:
    """List and manage the schedules stored in the broker."""


def _row(s: Schedule) -> dict[str, Any]:
    return {
        "name": s.name,
        "task": s.task,
        "cron": s.cron,
        "every": s.every,
        "tz": s.tz,
        "queue": s.queue,
        "priority": s.priority,
        "args": s.args,
        "kwargs": s.kwargs,
        "misfire": s.misfire,
        "max_backfill": s.max_backfill,
        "misfire_grace": s.misfire_grace,
        "overlap": s.overlap,
        "paused": s.paused,
        "source": s.source,
        "next_fire_at": s.next_fire_at,
        "next_fire": _iso_utc(s.next_fire_at),
        "last_fire_at": s.last_fire_at,
        "last_fire": _iso_utc(s.last_fire_at),
        "last_job_id": s.last_job_id,
    }


@schedules_group.command("list", cls=AppCommand)
@app_option
@url_option
@json_option
@friendly_errors
def list_command(app_target: str | None, url: str | None, as_json: bool) -> None:
    """Every stored schedule with its next and last run."""
    schedules, invalid = _app(app_target, url).schedules.scan()
    if as_json:
        rows_json = [_row(s) for s in schedules]
        rows_json += [{"name": name, "error": why} for name, why in invalid.items()]
        emit_json(sorted(rows_json, key=lambda r: str(r["name"])))
        return
    rows = [
        (
            s.name,
            s.task,
            f"{s.expr} ({s.tz})",
            "paused" if s.paused else "active",
            _when(s.next_fire_at, s.tz),
            _when(s.last_fire_at, s.tz),
            f"misfire={s.misfire} overlap={s.overlap}",
        )
        for s in schedules
    ]
    rows += [(name, "", f"invalid: {why}", "invalid", "", "", "") for name, why in invalid.items()]
    columns = [
        Col("name", is_id=True),
        Col("task"),
        Col("when"),
        Col("status"),
        Col("next run", drop=2),
        Col("last run", drop=3),
        Col("policies", drop=4),
    ]
    table("Schedules", columns, rows)


@schedules_group.command("next", cls=AppCommand)
@click.argument("name")
@click.option(
    "-n",
    "count",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="How many upcoming runs to show.",
)
@app_option
@url_option
@json_option
@friendly_errors
def next_command(
    name: str, count: int, app_target: str | None, url: str | None, as_json: bool
) -> None:
    """The next N run times of schedule NAME, in its time zone and in UTC."""
    app = _app(app_target, url)
    schedule = _get(app, name)
    try:
        times = app.schedules.next_runs(name, count)
    except ValidationError as exc:  # a bad stored definition (e.g. from an older version)
        raise click.ClickException(f"schedule {name!r} is invalid: {exc}") from exc
    if as_json:
        emit_json(
            {
                "name": name,
                "tz": schedule.tz,
                "paused": schedule.paused,
                "next": [
                    {"at": t, "local": _iso(t, schedule.tz), "utc": _iso_utc(t)} for t in times
                ],
            }
        )
        return
    title = f"Next runs of {name} ({schedule.expr}, {schedule.tz})"
    if schedule.paused:
        title += " — paused"
    table(
        title,
        ["#", "local", "UTC"],
        [(i, _when(t, schedule.tz), _when(t)) for i, t in enumerate(times, 1)],
    )


@schedules_group.command("history", cls=AppCommand)
@click.argument("name")
@click.option("-n", "count", type=click.IntRange(1, 1000), default=20, show_default=True)
@app_option
@url_option
@json_option
@friendly_errors
def history_command(
    name: str, count: int, app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Recent ticks of schedule NAME: fire time, job id, outcome (newest first)."""
    app = _app(app_target, url)
    entries = app.schedules.history(name, count)
    if as_json:
        emit_json(entries)
        return
    rows = [
        (
            _iso_utc(e.get("fire_at")),
            e.get("outcome"),
            e.get("job_id") or "",
            _detail(e),
            e.get("scheduler"),
        )
        for e in entries
    ]
    columns = [
        Col("fire time (UTC)"),
        Col("outcome"),
        Col("job", is_id=True),
        Col("detail", drop=2),
        Col("scheduler", drop=3),
    ]
    table(f"History of {name}", columns, rows)


def _detail(entry: dict[str, Any]) -> str:
    if entry.get("missed"):
        return f"{entry['missed']} missed through {_iso_utc(entry.get('through'))}"
    if entry.get("running"):
        return f"previous run {entry['running']} still running"
    return str(entry.get("error") or "")


def _set_paused(
    name: str, paused: bool, app_target: str | None, url: str | None, as_json: bool
) -> None:
    app = _app(app_target, url)
    try:
        schedule = app.schedules.set_paused(name, paused)
    except ScheduleNotFound as exc:
        raise click.ClickException(literal(str(exc), None)) from exc
    except ValidationError as exc:  # a bad stored document (another client, a hand edit)
        why = literal(str(exc), None)
        raise click.ClickException(f"schedule {name!r} is invalid: {why} (remove it)") from exc
    if as_json:
        emit_json(_row(schedule))
    else:
        say(
            f"{name}: {'paused' if paused else 'resumed'}; next run "
            f"{_when(schedule.next_fire_at, schedule.tz)}"
        )


@schedules_group.command("pause", cls=AppCommand)
@click.argument("name")
@app_option
@url_option
@json_option
@friendly_errors
def pause_command(name: str, app_target: str | None, url: str | None, as_json: bool) -> None:
    """Stop schedule NAME from firing until resumed."""
    _set_paused(name, True, app_target, url, as_json)


@schedules_group.command("resume", cls=AppCommand)
@click.argument("name")
@app_option
@url_option
@json_option
@friendly_errors
def resume_command(name: str, app_target: str | None, url: str | None, as_json: bool) -> None:
    """Resume schedule NAME from its next tick (ticks missed while paused do not run)."""
    _set_paused(name, False, app_target, url, as_json)


@schedules_group.command("remove", cls=AppCommand)
@click.argument("name")
@app_option
@url_option
@json_option
@friendly_errors
def remove_command(name: str, app_target: str | None, url: str | None, as_json: bool) -> None:
    """Delete schedule NAME (a schedule declared in code returns when a scheduler starts)."""
    removed = _app(app_target, url).schedules.remove(name)
    if as_json:
        emit_json({"name": name, "removed": removed})
    elif not removed:
        raise click.ClickException(f"schedule {literal(name)!r} not found")
    else:
        say(f"{name}: removed")


def register(group: click.Group) -> None:
    """Add ``scheduler`` and ``schedules`` to the ``conveyor`` command group."""
    group.add_command(scheduler_command)
    group.add_command(schedules_group)
