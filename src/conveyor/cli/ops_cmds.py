"""``conveyor quiet``, ``stop``, ``clear``, ``history``, ``run-now`` and ``bulk``: the operator
actions the dashboard's workers, queues, history and job pages offer, from a terminal.

Each calls the same audited function as the page and the JSON API (``monitoring.ops``,
``Operator``), recorded as ``cli:<os user>``. ``quiet`` / ``stop`` reach every process of the
worker's ``conveyor worker --processes N`` unless ``--process``; ``clear`` asks for
confirmation unless ``--yes``.
"""

from __future__ import annotations

from typing import Any

import click

from .common import AppCommand, app_option, emit_json, json_option, open_app, say, table, url_option
from .ops import cli_operator, friendly_errors, resolve_ids, search_filters
from .render import literal

_process_option = click.option(
    "--process",
    "one_process",
    is_flag=True,
    help="Only this process, not every process of its `conveyor worker --processes N`.",
)


def _command(kind: str, worker_id: str, one_process: bool, app: Any, as_json: bool) -> None:
    from ..monitoring import ops

    send = ops.quiet_worker if kind == "quiet" else ops.stop_worker
    scope = "process" if one_process else "group"
    command = send(cli_operator(app), worker_id, scope)
    if as_json:
        emit_json({"worker": worker_id, "command": command, "scope": scope})
        return
    whom = "This process" if one_process else "The worker (all its processes)"
    what = "goes quiet" if command == "quiet" else "drains its running jobs, then exits"
    say(f"{whom} {what} within one heartbeat: {worker_id}")


@click.command("quiet", cls=AppCommand)
@click.argument("worker_id", metavar="WORKER")
@_process_option
@app_option
@url_option
@json_option
@friendly_errors
def quiet_command(
    worker_id: str, one_process: bool, app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Make WORKER stop claiming new jobs (running ones finish; it stays up)."""
    _command("quiet", worker_id, one_process, open_app(app_target, url), as_json)


@click.command("stop", cls=AppCommand)
@click.argument("worker_id", metavar="WORKER")
@_process_option
@app_option
@url_option
@json_option
@friendly_errors
def stop_command(
    worker_id: str, one_process: bool, app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Stop WORKER gracefully, as SIGTERM does (ids: `conveyor status`)."""
    _command("stop", worker_id, one_process, open_app(app_target, url), as_json)


@click.command("clear", cls=AppCommand)
@click.argument("queue")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@app_option
@url_option
@json_option
@friendly_errors
def clear_command(
    queue: str, yes: bool, app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Delete the waiting (pending, scheduled, retrying) jobs of QUEUE; running jobs stay."""
    from ..monitoring import ops

    app = open_app(app_target, url)
    op = cli_operator(app)
    row = ops.clear_preview(op.inspector, queue)
    if not yes:
        if as_json:
            raise click.UsageError("--json needs --yes (no prompt in scripts)")
        click.confirm(f"Delete {row['waiting']} waiting jobs of {queue!r}?", abort=True)
    deleted = ops.clear_queue(op, queue)
    if as_json:
        emit_json({"queue": queue, "deleted": deleted})
    else:
        say(f"Deleted {deleted} waiting jobs of {queue}.")


@click.command("history", cls=AppCommand)
@click.option("--range", "range_name", default="1h", show_default=True, help="1h, 24h or 7d.")
@click.option("--queue", default=None, help="One queue only.")
@app_option
@url_option
@json_option
@friendly_errors
def history_command(
    range_name: str, queue: str | None, app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Processed and failed jobs per minute (per hour for 7d), as on the history page."""
    from ..monitoring import ops
    from ..monitoring.inspect import Inspector

    data = ops.history(Inspector(open_app(app_target, url)), range_name, queue)
    if as_json:
        emit_json(data)
        return
    from .ops import when

    rows = [(when(p["t"]), p["processed"], p["failed"]) for p in data["points"] if p["processed"]]
    rows += [] if rows else [("(no jobs in this range)", "", "")]
    table(f"History {range_name}", ["from", "processed", "failed"], rows)
    say(f"Total: {data['processed']} processed, {data['failed']} failed.")


@click.command("run-now", cls=AppCommand)
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@app_option
@url_option
@json_option
@friendly_errors
def run_now_command(
    ids: tuple[str, ...], app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Make scheduled or retrying jobs due now (IDs or unique prefixes)."""
    app = open_app(app_target, url)
    op = cli_operator(app)
    results = {job_id: op.run_now(job_id) for job_id in resolve_ids(app, ids)}
    done = [j for j, ok in results.items() if ok]
    refused = [j for j, ok in results.items() if not ok]
    if as_json:
        emit_json({"done": done, "refused": refused})
    else:
        for job_id in done:
            say(f"Due now: {job_id}.")
    if refused:
        shown = ", ".join(literal(job_id) for job_id in refused)  # ids are job data: hostile
        raise click.ClickException(f"not scheduled or retrying: {shown}")


@click.command("bulk", cls=AppCommand)
@click.argument("action", type=click.Choice(["retry", "cancel", "run_now", "delete"]))
@click.argument("ids", nargs=-1, metavar="[ID...]")
@click.option("--state", default=None, help="Job state (with the other search filters).")
@click.option("--task", default=None, help="Task name.")
@click.option("--queue", default=None, help="Queue name.")
@click.option("--since", default=None, help="Created at/after: ISO time, epoch or age (2h).")
@click.option("--until", default=None, help="Created before: ISO time, epoch or age.")
@click.option("--error", default=None, help="Text in the last error.")
@click.option("--text", default=None, help="Text in the arguments.")
@app_option
@url_option
@json_option
@friendly_errors
def bulk_command(
    action: str,
    ids: tuple[str, ...],
    app_target: str | None,
    url: str | None,
    as_json: bool,
    **filters: Any,
) -> None:
    """Apply ACTION to the jobs IDs (in full or unique prefixes), or to every job the search
    filters find (at most 10,000 per call; run it again for the rest)."""
    wanted = search_filters(**filters)
    if bool(ids) == bool(wanted):
        raise click.UsageError("give either job IDs or search filters (e.g. --state dead_letter)")
    app = open_app(app_target, url)
    selection: dict[str, Any] = {"ids": resolve_ids(app, ids)} if ids else {"filters": wanted}
    result = cli_operator(app).bulk(action, **selection)
    if as_json:
        emit_json(
            {"action": action, "matched": result.matched, "done": result.done}
            | {"truncated": result.truncated}
        )
        return
    say(f"{action}: {result.done} of {result.matched} jobs changed.")
    if result.truncated:
        say("Stopped at the limit: run it again for the rest.")


def register(group: click.Group) -> None:
    """Add the operator commands to the ``conveyor`` group."""
    for command in (
        quiet_command,
        stop_command,
        clear_command,
        history_command,
        run_now_command,
        bulk_command,
    ):
        group.add_command(command)
