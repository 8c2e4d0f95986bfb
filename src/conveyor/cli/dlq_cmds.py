"""``conveyor dlq list|requeue|purge``: dead letters from a terminal, audited like the
dashboard's actions. Ids are accepted in full or as unique prefixes."""

from __future__ import annotations

from typing import Any

import click

from .common import AppCommand, app_option, emit_json, json_option, open_app, say, url_option
from .inspect_cmds import page_json, print_page
from .ops import cli_operator, filter_options, friendly_errors, resolve_ids, search_filters
from .render import literal


@click.group("dlq")
def dlq_group() -> None:
    """Inspect, requeue and purge dead letters."""


@dlq_group.command("list", cls=AppCommand)
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
    from ..monitoring.inspect import Inspector

    result = Inspector(open_app(app_target, url)).dead_letters(
        search_filters(**filters), page=page, page_size=page_size
    )
    if as_json:
        emit_json(page_json(result, full=True))
        return
    print_page("Dead letters", result)


@dlq_group.command("requeue", cls=AppCommand)
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
    """Run dead-lettered jobs again with fresh attempts (by id or unique id prefix, or --all
    by filter)."""
    if bool(ids) == all_matching:
        raise click.UsageError("give job ids, or --all (optionally with --queue/--task/--error)")
    app = open_app(app_target, url)
    op = cli_operator(app)
    if all_matching:
        count = op.retry_dead({"queue": queue, "task": task, "error": error})
        refused: list[str] = []
    else:
        results = {job_id: op.retry(job_id) for job_id in resolve_ids(app, ids)}
        count = sum(results.values())
        refused = [j for j, ok in results.items() if not ok]
    if as_json:
        emit_json({"requeued": count, "refused": refused})
    else:
        say(f"Requeued {count} job(s).")
    if refused:
        raise click.ClickException(f"not dead-lettered or cancelled: {literal(', '.join(refused))}")


def _older_than_seconds(older_than: str | None) -> float | None:
    from ..monitoring.filters import parse_time

    if older_than is None:
        return None
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
    return seconds


@dlq_group.command("purge", cls=AppCommand)
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="Only dead letters that died more than AGE ago (seconds, or 30m / 2h / 7d).",
)
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--id", "ids", multiple=True, help="Only these job ids or id prefixes (repeatable).")
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
    seconds = _older_than_seconds(older_than)
    app = open_app(app_target, url)
    full_ids = resolve_ids(app, ids) if ids else []
    if not yes and not as_json:
        click.confirm("Delete these dead letters for good?", abort=True)
    op = cli_operator(app)
    count = op.delete_dead_ids(full_ids) if ids else op.purge_dead(older_than=seconds, queue=queue)
    if as_json:
        emit_json({"purged": count})
    else:
        say(f"Purged {count} dead letter(s).")


def register(group: click.Group) -> None:
    """Add ``dlq`` to the ``conveyor`` group."""
    group.add_command(dlq_group)
