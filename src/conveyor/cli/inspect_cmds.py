"""``conveyor status``, ``conveyor jobs``, ``conveyor job ID`` and ``conveyor dlq list|requeue|
purge``: the read side of operations from a terminal, through ``monitoring.inspect``."""

from __future__ import annotations

import functools
import getpass
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from ..app import Conveyor
from ..core.state import JobState
from ..errors import ConveyorError, JobNotFound, ValidationError
from ..monitoring.actions import Operator
from ..monitoring.filters import parse_time
from ..monitoring.inspect import Inspector, job_dict, preview_args
from .common import app_option, console, emit_json, json_option, open_app, table, url_option

F = TypeVar("F", bound=Callable[..., Any])


def friendly_errors(fn: F) -> F:
    """Turn Conveyor errors into click errors: a clear message and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValidationError as exc:
            raise click.BadParameter(exc.rule, param_hint=f"'{exc.field}'") from exc
        except (JobNotFound, LookupError) as exc:
            raise click.ClickException(str(exc).strip("'\"")) from exc
        except ConveyorError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


def when(ts: Any) -> str:
    """Epoch seconds as ISO 8601 UTC (empty for None)."""
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def age(seconds: Any) -> str:
    """A duration as ``12s`` / ``5m`` / ``3h`` (empty for None)."""
    if not isinstance(seconds, int | float):
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def cli_operator(app: Conveyor) -> Operator:
    """Audited actions recorded as ``cli:<os user>``."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in some containers
        user = "unknown"
    return Operator(app, actor=f"cli:{user}", source="cli")


def filter_options(fn: F) -> F:
    """The search filters shared by ``jobs`` and ``dlq list``."""
    options = [
        click.option("--id", "job_id", default=None, help="Job id or id prefix."),
        click.option("--task", default=None, help="Task name."),
        click.option("--queue", default=None, help="Queue name."),
        click.option(
            "--since", default=None, help="Created at/after: ISO time, epoch or age (2h)."
        ),
        click.option("--until", default=None, help="Created before: ISO time, epoch or age."),
        click.option("--error", default=None, help="Text in the last error (e.g. ValueError)."),
        click.option("--text", default=None, help="Text in the arguments."),
        click.option("--page", type=click.IntRange(min=1), default=1, show_default=True),
        click.option("--page-size", type=click.IntRange(1, 500), default=50, show_default=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _filters(**kw: Any) -> dict[str, Any]:
    names = {
        "job_id": "id",
        "task": "task",
        "queue": "queue",
        "since": "since",
        "until": "until",
        "error": "error",
        "text": "text",
        "state": "state",
    }
    return {names[k]: v for k, v in kw.items() if k in names and v not in (None, "")}


def _print_page(title: str, page: Any) -> None:
    rows = [
        (
            j.id,
            j.task,
            j.queue,
            str(j.state),
            f"{j.attempts}/{j.max_attempts or 'task'}",
            when(j.created_at),
            preview_args(j, 40),
            (j.last_error or "")[:50],
        )
        for j in page.items
    ]
    table(
        f"{title} — {page.total} total, page {page.page}/{page.pages}",
        ["id", "task", "queue", "state", "attempts", "created (UTC)", "args", "last error"],
        rows,
    )


QUEUE_COLUMNS = [
    "queue",
    "pending",
    "delayed",
    "active",
    "completed",
    "dead",
    "oldest pending",
    "per min",
    "error rate",
    "workers",
    "paused",
]


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


@click.command("status")
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
    data = Inspector(open_app(app_target, url)).overview(minutes)
    if as_json:
        emit_json(data)
        return
    table("Queues", QUEUE_COLUMNS, [_queue_row(q) for q in data["queues"]])
    table(
        "Workers",
        ["id", "queues", "concurrency", "running", "processed", "failed", "heartbeat"],
        [
            (
                w.get("id"),
                ",".join(w["queues"]),
                w.get("concurrency"),
                len(w["running"]),
                w.get("processed"),
                w.get("failed"),
                age(w["heartbeat_age"]),
            )
            for w in data["workers"]
        ],
    )
    if not data["alerts"]:
        console.print("[green]No alert is firing.[/]")
        return
    rows = [(a["state"], a["key"], a["message"], when(a["since"])) for a in data["alerts"]]
    table("Alerts", ["state", "alert", "message", "since (UTC)"], rows)


@click.command("jobs")
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
    result = Inspector(open_app(app_target, url)).search(
        _filters(**filters), page=page, page_size=page_size
    )
    if as_json:
        emit_json(
            {
                "items": [job_dict(j, full=False) for j in result.items],
                "total": result.total,
                "page": result.page,
                "pages": result.pages,
            }
        )
        return
    _print_page("Jobs", result)


@click.command("job")
@click.argument("job_id", metavar="ID")
@app_option
@url_option
@json_option
@click.option("--tracebacks", is_flag=True, help="Print full tracebacks of every error.")
@friendly_errors
def job_command(
    job_id: str, app_target: str | None, url: str | None, as_json: bool, tracebacks: bool
) -> None:
    """One job in detail: arguments, result, error history and timeline."""
    job = Inspector(open_app(app_target, url)).job(job_id)
    if as_json:
        emit_json(job)
        return
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
    ]
    table(f"Job {job['id']}", ["field", "value"], [(k, v) for k, v in facts if v not in (None, "")])
    if job["errors"]:
        table(
            "Errors",
            ["attempt", "kind", "type", "message", "at (UTC)"],
            [
                (
                    e.get("attempt"),
                    e.get("kind"),
                    e.get("type"),
                    e.get("message"),
                    when(e.get("at")),
                )
                for e in job["errors"]
            ],
        )
        for e in job["errors"] if tracebacks else job["errors"][-1:]:
            if e.get("traceback"):
                console.print(f"[bold]Traceback of attempt {e.get('attempt')}[/]", highlight=False)
                console.print(e["traceback"], markup=False, highlight=False)
    table(
        "Timeline",
        ["at (UTC)", "event", "detail"],
        [(when(t["at"]), t["event"], t["detail"]) for t in job["timeline"]],
    )


@click.group("dlq")
def dlq_group() -> None:
    """Inspect, requeue and purge dead letters."""


@dlq_group.command("list")
@app_option
@url_option
@json_option
@filter_options
@friendly_errors
def dlq_list(
    app_target: str | None,
    url: str | None,
    as_json: bool,
    page: int,
    page_size: int,
    **filters: Any,
) -> None:
    """Dead letters, newest first."""
    result = Inspector(open_app(app_target, url)).dead_letters(
        _filters(**filters), page=page, page_size=page_size
    )
    if as_json:
        emit_json(
            {
                "items": [job_dict(j) for j in result.items],
                "total": result.total,
                "page": result.page,
                "pages": result.pages,
            }
        )
        return
    _print_page("Dead letters", result)


@dlq_group.command("requeue")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option(
    "--all", "all_matching", is_flag=True, help="Requeue every dead letter matching the filters."
)
@click.option("--queue", default=None, help="With --all: only this queue.")
@click.option("--task", default=None, help="With --all: only this task.")
@click.option("--error", default=None, help="With --all: only errors containing this text.")
@app_option
@url_option
@json_option
@friendly_errors
def dlq_requeue(
    ids: tuple[str, ...],
    all_matching: bool,
    queue: str | None,
    task: str | None,
    error: str | None,
    app_target: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Run dead-lettered jobs again with fresh attempts (by id, or --all by filter)."""
    if bool(ids) == all_matching:
        raise click.UsageError("give job ids, or --all (optionally with --queue/--task/--error)")
    op = cli_operator(open_app(app_target, url))
    if all_matching:
        count = op.retry_dead({"queue": queue, "task": task, "error": error})
        refused: list[str] = []
    else:
        results = {job_id: op.retry(job_id) for job_id in ids}
        count = sum(results.values())
        refused = [j for j, ok in results.items() if not ok]
    if as_json:
        emit_json({"requeued": count, "refused": refused})
    else:
        console.print(f"Requeued {count} job(s).", highlight=False)
    if refused:
        raise click.ClickException(f"not dead-lettered or cancelled: {', '.join(refused)}")


@dlq_group.command("purge")
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="Only dead letters that died more than AGE ago (seconds, or 30m / 2h / 7d).",
)
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--id", "ids", multiple=True, help="Only these job ids (repeatable).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@app_option
@url_option
@json_option
@friendly_errors
def dlq_purge(
    older_than: str | None,
    queue: str | None,
    ids: tuple[str, ...],
    yes: bool,
    app_target: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Delete dead letters for good."""
    seconds = None
    if older_than is not None:
        parsed = parse_time(
            older_than if not older_than.replace(".", "").isdigit() else f"{older_than}s",
            0.0,
            "older-than",
        )
        seconds = -parsed if parsed is not None else None
        if seconds is None or seconds < 0:
            raise click.BadParameter(
                "must be an age like 3600, 30m, 2h or 7d", param_hint="'--older-than'"
            )
    if not yes and not as_json:
        click.confirm("Delete these dead letters for good?", abort=True)
    app = open_app(app_target, url)
    op = cli_operator(app)
    count = op.delete_dead_ids(ids) if ids else op.purge_dead(older_than=seconds, queue=queue)
    if as_json:
        emit_json({"purged": count})
    else:
        console.print(f"Purged {count} dead letter(s).", highlight=False)


def register(group: click.Group) -> None:
    """Add the inspection commands to the ``conveyor`` group."""
    for command in (status_command, jobs_command, job_command, dlq_group):
        group.add_command(command)
