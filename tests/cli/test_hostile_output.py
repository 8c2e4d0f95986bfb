"""Issue 20: job data never breaks a CLI listing and is always printed literally.

Markup (``[/]``, ``[red]``), emoji codes (``:two:``), terminal escape sequences, control and
right-to-left characters and 40 KB strings go through every listing command, on every backend:
in arguments, errors, ids, task names, worker records and schedules.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, PermanentError
from tests.support.hostile import TERMINAL_RAW, TERMINAL_TEXT, store_unvalidated

from .conftest import run

HOSTILE_ID = "id[/]:two:[red]\u202e\x1b"
HOSTILE_TASK = "mod:two:task"  # legal, and an emoji code to rich
ALL = " | ".join(v for k, v in TERMINAL_TEXT.items() if k != "huge")


def seed(app: Conveyor, clock: FakeClock) -> dict[str, str]:
    """Store hostile data everywhere a listing shows it; returns the job ids by role."""

    @app.task(name="hostile_boom", max_attempts=1)
    def hostile_boom(*args: Any, **kwargs: Any) -> None:
        raise PermanentError(ALL + TERMINAL_TEXT["huge"])

    ids = {
        # a name-only producer (no signature binding): the stored kwargs are hostile on purpose
        "args": app.runtime.enqueue("add", [ALL, TERMINAL_TEXT["huge"]], {"k": ALL}).id,
        "dead": app.enqueue("hostile_boom", [ALL], queue="default").id,
        "odd_id": store_unvalidated(app, HOSTILE_ID, HOSTILE_TASK, ALL),
    }
    app.worker(["default"]).run_until_idle()
    app.schedule_cron("two", "add", every=60, args=[ALL, TERMINAL_TEXT["huge"]])
    scheduler = app.scheduler(sync=False)
    scheduler.tick(clock.now())
    clock.advance(61)
    scheduler.tick(clock.now())
    [fired] = [e["job_id"] for e in app.schedules.history("two") if e.get("job_id")][:1]
    ids["scheduled"] = fired
    app.broker.doc_put(
        "workers",
        "w[/]:two:",
        {
            "id": "w[/]:two:\x1b[31m",
            "queues": ["default", "[red]q\u202e"],
            "heartbeat_at": clock.now(),
            "running": [],
            "concurrency": ":two:",
        },
        clock.now(),
        ttl=30,
    )
    return ids


def check(output: str, limit: int = 60_000) -> None:
    """Literal, bounded output: markup and emoji codes shown as typed, nothing raw."""
    for raw in TERMINAL_RAW:
        assert raw not in output, (raw, output[:3000])
    assert "2\ufe0f" not in output and "\U0001f44d" not in output  # no emoji substituted
    assert len(output) < limit, len(output)


@pytest.mark.parametrize("width", [200, 80])
def test_every_listing_prints_hostile_data_literally(
    cli_app: tuple[Conveyor, str], clock: FakeClock, width: int
) -> None:
    app, target = cli_app
    ids = seed(app, clock)
    assert ids["scheduled"] == "sched:two:1700000040000"
    commands = [
        ["status"],
        ["queues"],
        ["jobs"],
        ["jobs", "--state", "dead_letter"],
        ["dlq", "list"],
        ["schedules", "list"],
        ["schedules", "next", "two"],
        ["schedules", "history", "two"],
        *(["job", job_id] for job_id in ids.values()),
        ["job", ids["dead"], "--tracebacks"],
    ]
    for command in commands:
        result = run(*command, "--app", target, width=width)
        assert result.exit_code == 0, (command, result.output[-3000:])
        check(result.output)
        if command[0] in ("jobs", "job", "dlq"):
            assert "[/]" in result.output and ":two:" in result.output, command
        if command == ["jobs"] and width == 200:
            for job_id in (ids["args"], ids["scheduled"]):
                assert job_id in result.output, (command, job_id)  # full ids, emoji-free
    status = run("status", "--app", target, width=width).output
    assert ":two:" in status and "\\x1b" in status  # the worker record, escaped
    detail = run("job", ids["dead"], "--app", target, width=width).output
    assert "\\x1b[2J" in detail and "\\u202e" in detail and "[red]not red[/red]" in detail
    assert "chars)" in detail  # the 40 KB error is cut with a note


def test_hostile_ids_in_errors_and_actions(cli_app: tuple[Conveyor, str]) -> None:
    _, target = cli_app
    missing = run("job", "[/]nope:two:\x1b[2J", "--app", target)
    assert missing.exit_code == 1 and "[/]nope:two:\\x1b[2J" in missing.output
    check(missing.output)
    queue = run("pause", "[/]", "--app", target)
    assert queue.exit_code == 2 and "Traceback" not in queue.output
    done = run("enqueue", "add", "--args", '["[/]"]', "--job-id", "x:two:y", "--app", target)
    assert done.exit_code == 0 and "Enqueued x:two:y on default" in done.output
