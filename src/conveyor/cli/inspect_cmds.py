"""``conveyor status``, ``conveyor jobs`` and ``conveyor job ID``: the read side of operations
from a terminal, through ``monitoring.inspect``. Dead letters are in ``dlq_cmds``.

Every value from the broker is printed literally (``render``); ids are printed in full and
accepted as unique prefixes (``monitoring.lookup``)."""

from __future__ import annotations

from typing import Any

import click

from ..broker.jobdocs import progress_text
from ..core.state import JobState
from .common import (
    AppCommand,
    app_option,
    emit_json,
    get_console,
    json_option,
    open_app,
    say,
    table,
    url_option,
)
from .ops import age, filter_options, friendly_errors, resolve_ids, search_filters, when
from .render import DETAIL_LIMIT, Col, literal

JOB_COLUMNS = [
    Col("id", is_id=True),
    Col("task"),
    Col("queue", drop=3),
    Col("state"),
    Col("attempts", drop=4),
    Col("created (UTC)", drop=6),
    Col("args", drop=5, limit=40),
    Col("last error", drop=2, limit=50),
]

QUEUE_COLUMNS = [
    Col("queue"),
    Col("pending"),
    Col("delayed", drop=4),
    Col("active", drop=2),
    Col("completed", drop=7),
    Col("dead", drop=1),
    Col("oldest pending", drop=3),
    Col("per min", drop=6),
    Col("error rate", drop=5),
    Col("workers", drop=3),
    Col("paused", drop=1),
]

WORKER_COLUMNS = [
    Col("id", is_id=True),
    Col("queues"),
    Col("concurrency", drop=3),
    Col("running", drop=1),
    Col("processed", drop=4),
    Col("failed", drop=4),
    Col("heartbeat", drop=2),
]


def print_page(title: str, page: Any) -> None:
    """One page of jobs as a table (ids in full)."""
    from ..monitoring.inspect import preview_args

    rows = [
        (
            j.id,
            j.task,
            j.queue,
            str(j.state),
            f"{j.attempts}/{j.max_attempts or 'task'}",
            when(j.created_at),
            preview_args(j, 40),
            j.last_error or "",
        )
        for j in page.items
    ]
    table(f"{title} — {page.total} total, page {page.page}/{page.pages}", JOB_COLUMNS, rows)


def page_json(page: Any, *, full: bool) -> dict[str, Any]:
    """A page of jobs for ``--json``."""
    from ..monitoring.inspect import job_dict

    return {
        "items": [job_dict(j, full=full) for j in page.items],
        "total": page.total,
        "page": page.page,
        "pages": page.pages,
    }


def _queue_row(q: dict[str, Any]) -> tuple[Any, ...]:
    c, rate = q["counts"], q["failure_rate"]
    return (
        q["name"],
        q["depth"],
        c["scheduled"] + c["retry_scheduled"],
        c["active"],
        c["completed"],
        q["dead_letters"],
        age(q["oldest_pending_age"]),
        f"{q['throughput_per_minute']:.1f}",
        "" if rate is None else f"{rate * 100:.1f}%",
        q["workers"],
        "yes" if q["paused"] else "",
    )


def print_shards(queues: list[dict[str, Any]]) -> None:
    """The per-shard depth of every sharded queue (issue 18), below the queues table."""
    rows = [
        (q["name"], s["name"], s["depth"], s["running"], "yes" if s["paused"] else "")
        for q in queues
        for s in q.get("shards") or ()
    ]
    if rows:
        table("Shards", ["queue", "shard", "pending", Col("active", drop=1), "paused"], rows)


def _worker_row(w: dict[str, Any]) -> tuple[Any, ...]:
    return (
        w.get("id"),
        ",".join(str(q) for q in w["queues"]),
        w.get("concurrency"),
        len(w["running"]),
        w.get("processed"),
        w.get("failed"),
        age(w["heartbeat_age"]),
    )


def _print_alerts(alerts: list[dict[str, Any]], rules: int, bare: bool) -> None:
    """Firing alerts, or what their absence means: no rule configured is not "all is well"."""
    if alerts:
        rows = [(a["state"], a["key"], a["message"], when(a["since"])) for a in alerts]
        table("Alerts", ["state", "alert", Col("message", drop=1), "since (UTC)"], rows)
    elif rules:
        say(f"No alert is firing ({rules} rule(s) configured).", style="green")
    elif bare:
        say("No alert rules: none configured here (give your APP to see its rules).")
    else:
        say("No alert rules are configured in this app: nothing is watched (docs/monitoring.md).")


@click.command("status", cls=AppCommand)
@app_option
@url_option
@json_option
@click.option(
    "--minutes",
    type=click.IntRange(1, 1440),
    default=5,
    show_default=True,
    help="Window for throughput and error rate.",
)
@friendly_errors
def status_command(app_target: str | None, url: str | None, as_json: bool, minutes: int) -> None:
    """Queues (depth, rates, error rate), live workers and active alerts."""
    from ..monitoring.inspect import Inspector

    inspector = Inspector(open_app(app_target, url))
    data = inspector.overview(minutes)
    if as_json:
        emit_json(data)
        return
    table("Queues", QUEUE_COLUMNS, [_queue_row(q) for q in data["queues"]])
    print_shards(data["queues"])
    table("Workers", WORKER_COLUMNS, [_worker_row(w) for w in data["workers"]])
    if data.get("flow"):  # flow control (issue 15): groups held back by a limit, and why
        rows = [(g["queue"], g["group"], g["waiting"], g["why"]) for g in data["flow"]]
        table("Waiting for limits", ["queue", "group", "waiting", Col("why", drop=1)], rows)
    _print_alerts(data["alerts"], len(inspector.alert_rules()), bare=not app_target)


@click.command("jobs", cls=AppCommand)
@app_option
@url_option
@json_option
@click.option("--state", type=click.Choice([s.value for s in JobState]), default=None)
@filter_options
@friendly_errors
def jobs_command(
    app_target: str | None,
    url: str | None,
    as_json: bool,
    page: int,
    page_size: int,
    **filters: Any,
) -> None:
    """Search jobs, newest first (all filters combine)."""
    from ..monitoring.inspect import Inspector

    result = Inspector(open_app(app_target, url)).search(
        search_filters(**filters), page=page, page_size=page_size
    )
    if as_json:
        emit_json(page_json(result, full=False))
        return
    print_page("Jobs", result)


def _facts(job: dict[str, Any]) -> list[tuple[str, Any]]:
    facts = [
        ("id", job["id"]),
        ("task", job["task"]),
        ("queue", job["queue"]),
        ("state", job["state"]),
        ("attempts", f"{job['attempts']}/{job['max_attempts'] or 'task default'}"),
        ("priority", job["priority"]),
        ("created", when(job["created_at"])),
        ("run at", when(job["run_at"])),
        ("started", when(job["started_at"])),
        ("finished", when(job["finished_at"])),
        ("args", job["args"]),
        ("kwargs", job["kwargs"]),
        ("result", job["result"]),
        ("last error", job["last_error"]),
        ("progress", progress_text(job.get("progress"))),  # current_job().progress()
        ("cancel", "requested: its worker is stopping it" if job.get("cancel_requested") else None),
        ("waiting for", job.get("waiting_for")),  # flow control (issue 15)
    ]
    return [(k, v) for k, v in facts if v not in (None, "")]


def _print_errors(errors: list[dict[str, Any]], tracebacks: bool) -> None:
    from rich.text import Text

    table(
        "Errors",
        ["attempt", Col("kind", drop=2), "type", Col("message", limit=500), "at (UTC)"],
        [
            (e.get("attempt"), e.get("kind"), e.get("type"), e.get("message"), when(e.get("at")))
            for e in errors
        ],
    )
    console = get_console()
    for e in errors if tracebacks else errors[-1:]:
        if e.get("traceback"):
            console.print(Text(f"Traceback of attempt {literal(e.get('attempt'))}", style="bold"))
            console.print(Text(literal(e["traceback"], 20 * DETAIL_LIMIT, keep_newlines=True)))


@click.command("job", cls=AppCommand)
@click.argument("job_id", metavar="ID")
@app_option
@url_option
@json_option
@click.option("--tracebacks", is_flag=True, help="Print full tracebacks of every error.")
@friendly_errors
def job_command(
    job_id: str, app_target: str | None, url: str | None, as_json: bool, tracebacks: bool
) -> None:
    """One job in detail: arguments, result, error history and timeline (ID or a unique
    prefix of it)."""
    from ..monitoring.inspect import Inspector

    app = open_app(app_target, url)
    [full_id] = resolve_ids(app, [job_id])
    job = Inspector(app).job(full_id)
    if as_json:
        emit_json(job)
        return
    table(
        f"Job {job['id']}",
        [Col("field"), Col("value", limit=DETAIL_LIMIT)],
        _facts(job),
    )
    if job["errors"]:
        _print_errors(job["errors"], tracebacks)
    table(
        "Timeline",
        ["at (UTC)", "event", Col("detail", drop=1)],
        [(when(t["at"]), t["event"], t["detail"]) for t in job["timeline"]],
    )


def register(group: click.Group) -> None:
    """Add the inspection commands to the ``conveyor`` group."""
    for command in (status_command, jobs_command, job_command):
        group.add_command(command)
