"""``conveyor enqueue``, ``conveyor queues``, ``conveyor pause`` and ``conveyor resume``:
operator actions from a terminal, audited like the dashboard's."""

from __future__ import annotations

from typing import Any

import click
import orjson

from ..monitoring.inspect import Inspector
from .common import app_option, console, emit_json, json_option, open_app, table, url_option
from .inspect_cmds import age, cli_operator, friendly_errors


def _json_arg(raw: str | None, name: str, kind: type) -> Any:
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"is not valid JSON: {exc}", param_hint=f"'--{name}'") from exc
    if not isinstance(value, kind):
        expected = "a JSON array" if kind is list else "a JSON object"
        raise click.BadParameter(
            f"must be {expected}, got {type(value).__name__}", param_hint=f"'--{name}'"
        )
    return value


@click.command("enqueue")
@click.argument("task")
@click.option(
    "--args",
    "args_json",
    default=None,
    metavar="JSON",
    help="Positional arguments, e.g. '[1, \"a\"]'.",
)
@click.option(
    "--kwargs",
    "kwargs_json",
    default=None,
    metavar="JSON",
    help='Keyword arguments, e.g. \'{"to": "a@x.com"}\'.',
)
@click.option("--queue", default=None, help="Queue (default: the task's, else 'default').")
@click.option("--priority", type=int, default=None, help="Lower runs first.")
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Run after this many seconds.",
)
@click.option("--max-attempts", type=click.IntRange(min=1), default=None)
@click.option(
    "--idempotency-key", default=None, help="Enqueue at most once per key (within its TTL)."
)
@click.option("--job-id", default=None, help="A custom job id (must be new).")
@app_option
@url_option
@json_option
@friendly_errors
def enqueue_command(
    task: str,
    args_json: str | None,
    kwargs_json: str | None,
    queue: str | None,
    priority: int | None,
    delay: float | None,
    max_attempts: int | None,
    idempotency_key: str | None,
    job_id: str | None,
    app_target: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Enqueue TASK by name (the task need not be importable here; workers must know it)."""
    args = _json_arg(args_json, "args", list)
    kwargs = _json_arg(kwargs_json, "kwargs", dict)
    op = cli_operator(open_app(app_target, url))
    handle = op.enqueue(
        task,
        args,
        kwargs,
        queue=queue,
        priority=priority,
        delay=delay,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        job_id=job_id,
    )
    out = {
        "id": handle.id,
        "task": handle.task,
        "queue": handle.queue,
        "state": str(handle.state),
        "duplicate": handle.duplicate,
    }
    if as_json:
        emit_json(out)
    elif handle.duplicate:
        console.print(f"Duplicate of existing job {handle.id} ({handle.state}).", highlight=False)
    else:
        console.print(f"Enqueued {handle.id} on {handle.queue} ({handle.state}).", highlight=False)


@click.command("queues")
@app_option
@url_option
@json_option
@friendly_errors
def queues_command(app_target: str | None, url: str | None, as_json: bool) -> None:
    """Every queue with its counts by state and whether it is paused."""
    rows = Inspector(open_app(app_target, url)).queues()
    if as_json:
        emit_json({"queues": rows})
        return
    table(
        "Queues",
        [
            "queue",
            "scheduled",
            "pending",
            "active",
            "retrying",
            "completed",
            "dead",
            "cancelled",
            "oldest pending",
            "paused",
        ],
        [
            (
                q["name"],
                q["counts"]["scheduled"],
                q["counts"]["pending"],
                q["counts"]["active"],
                q["counts"]["retry_scheduled"],
                q["counts"]["completed"],
                q["counts"]["dead_letter"],
                q["counts"]["cancelled"],
                age(q["oldest_pending_age"]),
                "yes" if q["paused"] else "",
            )
            for q in rows
        ],
    )


@click.command("pause")
@click.argument("queue")
@app_option
@url_option
@json_option
@friendly_errors
def pause_command(queue: str, app_target: str | None, url: str | None, as_json: bool) -> None:
    """Stop workers from taking jobs of QUEUE (running jobs finish)."""
    cli_operator(open_app(app_target, url)).pause_queue(queue)
    if as_json:
        emit_json({"queue": queue, "paused": True})
    else:
        console.print(f"Queue {queue} paused.", highlight=False)


@click.command("resume")
@click.argument("queue")
@app_option
@url_option
@json_option
@friendly_errors
def resume_command(queue: str, app_target: str | None, url: str | None, as_json: bool) -> None:
    """Let workers take jobs of QUEUE again."""
    cli_operator(open_app(app_target, url)).resume_queue(queue)
    if as_json:
        emit_json({"queue": queue, "paused": False})
    else:
        console.print(f"Queue {queue} resumed.", highlight=False)


def register(group: click.Group) -> None:
    """Add the admin commands to the ``conveyor`` group."""
    for command in (enqueue_command, queues_command, pause_command, resume_command):
        group.add_command(command)
