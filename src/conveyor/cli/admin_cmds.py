"""``conveyor enqueue``, ``queues``, ``pause``, ``resume``, ``cancel`` and ``retry``: operator
actions from a terminal, audited like the dashboard's.

``pause``/``resume`` act only on a known queue: one that holds jobs (in any state), is paused,
is declared by the app's tasks, or is served by a live worker; ``pause --force`` pauses a queue
before it exists. ``cancel``/``retry`` take job ids or unique id prefixes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
import orjson

from ..core.job import MAX_DELAY
from ..core.values import loads_exact
from .common import (
    AppCommand,
    Finite,
    app_option,
    emit_json,
    json_option,
    open_app,
    say,
    table,
    url_option,
)
from .ops import age, cli_operator, friendly_errors, resolve_ids
from .render import Col, literal

if TYPE_CHECKING:
    from ..app import Conveyor


def _json_arg(raw: str | None, name: str, kind: type) -> Any:
    if raw is None:
        return None
    try:
        value = loads_exact(raw)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"is not valid JSON: {exc}", param_hint=f"'--{name}'") from exc
    except ValueError as exc:  # an integer beyond 64 bits (orjson would read a float)
        raise click.BadParameter(str(exc), param_hint=f"'--{name}'") from exc
    if not isinstance(value, kind):
        expected = "a JSON array" if kind is list else "a JSON object"
        raise click.BadParameter(
            f"must be {expected}, got {type(value).__name__}", param_hint=f"'--{name}'"
        )
    return value


@click.command("enqueue", cls=AppCommand)
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
    type=Finite(min=0, max=MAX_DELAY),
    default=None,
    metavar="SECONDS",
    help="Run after this many seconds (at most 100 years).",
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
    op = cli_operator(open_app(app_target, url, create=True))
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
        say(f"Duplicate of existing job {handle.id} ({handle.state}).")
    else:
        say(f"Enqueued {handle.id} on {handle.queue} ({handle.state}).")


@click.command("queues", cls=AppCommand)
@app_option
@url_option
@json_option
@friendly_errors
def queues_command(app_target: str | None, url: str | None, as_json: bool) -> None:
    """Every queue with its counts by state and whether it is paused."""
    from ..monitoring.inspect import Inspector

    rows = Inspector(open_app(app_target, url)).queues()
    if as_json:
        emit_json({"queues": rows})
        return
    table(
        "Queues",
        [
            Col("queue"),
            Col("scheduled", drop=3),
            Col("pending"),
            Col("active", drop=2),
            Col("retrying", drop=3),
            Col("completed", drop=5),
            Col("dead", drop=1),
            Col("cancelled", drop=5),
            Col("oldest pending", drop=4),
            Col("paused", drop=1),
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
    from .inspect_cmds import print_shards

    print_shards(rows)


def known_queues(app: Conveyor) -> set[str]:
    """Queues that exist: holding jobs, paused, declared by the app's tasks, or served by a
    live worker."""
    from ..monitoring.inspect import Inspector

    broker = app.broker
    known = set(broker.counts()) | set(broker.paused_queues())
    known |= {str(t.queue) for t in app.runtime.tasks.values() if getattr(t, "queue", None)}
    known |= set(app.runtime.shards.queues)  # sharded queues (issue 18)
    for worker in Inspector(app).workers():
        known.update(worker["queues"])
    return known


def _check_queue(app: Conveyor, queue: str) -> None:
    from ..core.job import validate_queue_name

    validate_queue_name(queue)
    known = known_queues(app)
    if queue not in known:
        from difflib import get_close_matches

        close = get_close_matches(queue, sorted(known), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        names = ", ".join(sorted(known)[:20]) or "none"
        raise click.ClickException(
            f"unknown queue {queue!r} (known: {names}){hint} "
            "A queue is known when it holds jobs, is paused, is declared by the app's tasks "
            "or is served by a worker; --force pauses it anyway."
        )


@click.command("pause", cls=AppCommand)
@click.argument("queue")
@click.option("--force", is_flag=True, help="Pause QUEUE even if it is not known yet.")
@app_option
@url_option
@json_option
@friendly_errors
def pause_command(
    queue: str, force: bool, app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Stop workers from taking jobs of QUEUE (running jobs finish)."""
    app = open_app(app_target, url)
    if not force:
        _check_queue(app, queue)
    cli_operator(app).pause_queue(queue)
    if as_json:
        emit_json({"queue": queue, "paused": True})
    else:
        say(f"Queue {queue} paused.")


@click.command("resume", cls=AppCommand)
@click.argument("queue")
@app_option
@url_option
@json_option
@friendly_errors
def resume_command(queue: str, app_target: str | None, url: str | None, as_json: bool) -> None:
    """Let workers take jobs of QUEUE again."""
    app = open_app(app_target, url)
    _check_queue(app, queue)
    was_paused = queue in app.broker.paused_queues()
    cli_operator(app).resume_queue(queue)
    if as_json:
        emit_json({"queue": queue, "paused": False})
    else:
        say(f"Queue {queue} resumed." if was_paused else f"Queue {queue} was not paused.")


def _act(
    action: str, ids: tuple[str, ...], app_target: str | None, url: str | None, as_json: bool
) -> None:
    app = open_app(app_target, url)
    op = cli_operator(app)
    results = {job_id: getattr(op, action)(job_id) for job_id in resolve_ids(app, ids)}
    done = [j for j, ok in results.items() if ok]
    refused = [j for j, ok in results.items() if not ok]
    verb = {"cancel": "Cancelled", "retry": "Requeued"}[action]
    if as_json:
        emit_json({"done": done, "refused": refused})
    else:
        for job_id in done:
            say(f"{verb} {job_id}.")
    if refused:
        why = {"cancel": "already finished", "retry": "not dead-lettered or cancelled"}
        raise click.ClickException(f"{why[action]}: {literal(', '.join(refused))}")


@click.command("cancel", cls=AppCommand)
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@app_option
@url_option
@json_option
@friendly_errors
def cancel_command(
    ids: tuple[str, ...], app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Cancel jobs; a running one is stopped by its worker (IDs in full or unique prefixes)."""
    _act("cancel", ids, app_target, url, as_json)


@click.command("retry", cls=AppCommand)
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@app_option
@url_option
@json_option
@friendly_errors
def retry_command(
    ids: tuple[str, ...], app_target: str | None, url: str | None, as_json: bool
) -> None:
    """Run dead-lettered or cancelled jobs again with fresh attempts (IDs or unique
    prefixes)."""
    _act("retry", ids, app_target, url, as_json)


def register(group: click.Group) -> None:
    """Add the admin commands to the ``conveyor`` group."""
    for command in (
        enqueue_command,
        queues_command,
        pause_command,
        resume_command,
        cancel_command,
        retry_command,
    ):
        group.add_command(command)
