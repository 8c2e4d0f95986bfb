"""``conveyor enqueue``, ``queues``, ``pause``, ``resume`` and ``dashboard`` on every backend."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conveyor import Conveyor
from conveyor.cli.main import cli

from .conftest import run, run_json


def test_enqueue_by_name(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    out = run_json("enqueue", "add", "--args", "[1, 2]", "--app", target)
    assert out["state"] == "pending" and out["queue"] == "default" and not out["duplicate"]
    job = app.get_job(out["id"])
    assert job.args == [1, 2]
    opts = run_json(
        "enqueue",
        "other.task",
        "--kwargs",
        '{"to": "x"}',
        "--queue",
        "mail",
        "--priority",
        "-5",
        "--delay",
        "30",
        "--max-attempts",
        "2",
        "--idempotency-key",
        "k",
        "--app",
        target,
    )
    assert opts["state"] == "scheduled" and opts["queue"] == "mail"
    again = run_json(
        "enqueue", "other.task", "--queue", "mail", "--idempotency-key", "k", "--app", target
    )
    assert again["duplicate"] and again["id"] == opts["id"]
    text = run("enqueue", "add", "--args", "[3, 4]", "--job-id", "my-id", "--app", target)
    assert text.exit_code == 0 and "Enqueued my-id on default" in text.output
    dup = run("enqueue", "add", "--job-id", "my-id", "--app", target)
    assert dup.exit_code == 1 and "already exists" in dup.output
    assert app.broker.log_read("audit")[0]["actor"].startswith("cli:")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "--args", "{bad"], "is not valid JSON"),
        (["add", "--args", '{"a": 1}'], "JSON array"),
        (["add", "--kwargs", "[1]"], "JSON object"),
        (["bad name"], "'task'"),
        (["add", "--queue", "a b"], "'queue'"),
        (["add", "--delay", "-1"], "--delay"),
    ],
)
def test_enqueue_bad_input(cli_app: tuple[Conveyor, str], args: list[str], message: str) -> None:
    _, target = cli_app
    result = run("enqueue", *args, "--app", target)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_queues_pause_resume(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    app.enqueue("add", [1, 1])
    assert run_json("pause", "default", "--app", target) == {"queue": "default", "paused": True}
    rows = run_json("queues", "--app", target)["queues"]
    assert rows[0]["name"] == "default" and rows[0]["paused"] and rows[0]["counts"]["pending"] == 1
    text = run("queues", "--app", target).output
    assert "default" in text and "yes" in text
    assert "resumed" in run("resume", "default", "--app", target).output
    assert app.broker.paused_queues() == set()
    assert run("pause", "no good", "--app", target).exit_code == 2
    actions = [e["action"] for e in app.broker.log_read("audit")]
    assert actions == ["queue.resume", "queue.pause"]


def test_app_loading_errors() -> None:
    assert "module:attribute" in run("status", "--app", "nocolon").output
    assert run("status", "--app", "no_such_module_xyz:app").exit_code == 2


def test_dashboard_refuses_public_bind_without_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TOKEN", "USERNAME", "PASSWORD"):
        monkeypatch.delenv(f"CONVEYOR_DASHBOARD_{var}", raising=False)
    result = run("dashboard", "--url", "memory://", "--host", "0.0.0.0")
    assert result.exit_code == 2 and "without authentication" in result.output
    monkeypatch.setenv("CONVEYOR_DASHBOARD_PASSWORD", "short")
    weak = run("dashboard", "--url", "memory://")
    assert weak.exit_code == 2 and "at least 8" in weak.output


def test_commands_have_help() -> None:
    for command in ("enqueue", "queues", "pause", "resume", "dashboard"):
        result = run(command, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["add", "--args", '["name-\\udcff.txt"]'], "--args"),  # orjson refuses the escape
        (["add", "--args", "[" + "[" * 600 + "]" * 600 + "]"], "args"),
        (["add", "--kwargs", '{"k": ' + "[" * 300 + "]" * 300 + "}"], "kwargs"),
        (["add", "--max-attempts", str(2**64)], "max_attempts"),
        (["add", "--job-id", "name-\udcff"], "job_id"),  # argv bytes that are not UTF-8
        (["add", "--idempotency-key", "k\udcff"], "idempotency_key"),
        (["add", "--job-id", "id\n"], "job_id"),
        (["add", "--queue", "default\n"], "queue"),
        (["add\n"], "task"),
    ],
)
def test_enqueue_hostile_input_is_a_clean_error(
    cli_app: tuple[Conveyor, str], args: list[str], field: str
) -> None:
    """Issue 13: a ValidationError naming the field, exit code 2, no traceback, nothing stored."""
    app, target = cli_app
    result = CliRunner().invoke(cli, ["enqueue", *args, "--app", target])
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"'{field}'" in result.output and "Traceback" not in result.output, result.output
    assert app.search().total == 0
