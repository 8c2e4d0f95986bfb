"""``--json`` with hostile job data: every listing prints valid JSON (one document) that holds
the stored strings exactly — markup, escapes, bidi overrides, NUL and 40 KB values included —
on every backend. Terminal escaping is for tables only; scripts get the data as stored."""

from __future__ import annotations

from typing import Any

import orjson

from conveyor import Conveyor, FakeClock
from tests.support.hostile import TERMINAL_TEXT

from .conftest import run
from .test_hostile_output import ALL, seed


def strings(value: Any) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_every_json_listing_is_valid_and_exact(
    cli_app: tuple[Conveyor, str], clock: FakeClock
) -> None:
    app, target = cli_app
    ids = seed(app, clock)
    commands = [
        ["status"],
        ["queues"],
        ["jobs"],
        ["jobs", "--state", "dead_letter"],
        ["dlq", "list"],
        ["schedules", "list"],
        ["schedules", "history", "two"],
        ["limits", "show"],
        ["history"],
        *(["job", job_id] for job_id in ids.values()),
    ]
    for command in commands:
        result = run(*command, "--app", target, "--json")
        assert result.exit_code == 0, (command, result.output[-2000:])
        data = orjson.loads(result.output)  # one valid document, nothing printed around it
        found = strings(data)
        if command[0] in ("jobs", "job", "dlq"):
            assert any(ALL in s for s in found), command
    detail = orjson.loads(run("job", ids["args"], "--app", target, "--json").output)
    assert TERMINAL_TEXT["huge"] in strings(detail)  # whole, not cut
    assert ids["odd_id"] in strings(orjson.loads(run("jobs", "--app", target, "--json").output))
