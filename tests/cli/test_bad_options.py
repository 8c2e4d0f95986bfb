"""A bad option value is a usage error on every backend: exit 2 and a message naming the option,
never a traceback (an out-of-range page used to overflow SQLite's and PostgreSQL's integers)."""

from __future__ import annotations

import pytest

from conveyor import Conveyor
from conveyor.errors import ValidationError
from conveyor.monitoring.inspect import Inspector

from .conftest import run

HUGE = str(10**20)

CASES = [
    (["jobs", "--page", HUGE], "--page"),
    (["jobs", "--page", "-1"], "--page"),
    (["jobs", "--page", "1e99"], "--page"),
    (["jobs", "--page-size", str(10**9)], "--page-size"),
    (["dlq", "list", "--page", HUGE], "--page"),
    (["jobs", "--since", "1e999"], "since"),
    (["jobs", "--state", "\x1b[31mred"], "--state"),
    (["jobs", "--queue", "a\nb"], "queue"),
    (["history", "--range", "1y"], "range"),
    (["schedules", "next", "nightly", "-n", HUGE], "-n"),
    (["limits", "set", "rate:add", "5/s", "--burst", "nan"], "burst"),
    (["enqueue", "add", "--priority", HUGE], "priority"),
    (["enqueue", "add", "--delay", "-5"], "--delay"),
]


@pytest.mark.parametrize(("args", "option"), CASES, ids=lambda v: repr(v)[:40])
def test_a_bad_option_value_exits_2_naming_the_option(
    cli_app: tuple[Conveyor, str], args: list[str], option: str
) -> None:
    _, target = cli_app
    result = run(*args, "--app", target)  # an escaping exception fails the test
    assert result.exit_code == 2, (result.exit_code, result.output[-500:])
    assert f"'{option}'" in result.output, result.output[-500:]
    assert "\x1b" not in result.output and "Traceback" not in result.output


def test_the_inspector_refuses_a_page_past_its_bound(cli_app: tuple[Conveyor, str]) -> None:
    app, _ = cli_app
    app.enqueue("add", [1, 2])
    with pytest.raises(ValidationError) as info:
        Inspector(app).search({}, page=10**20)
    assert info.value.field == "page"
    assert Inspector(app).search({}, page=1_000_000).items == []
