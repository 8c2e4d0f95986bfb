"""Issue 20: the app given the same way to every command, clear one-line errors, --version,
"did you mean", no SQLite file created by a read command, no phantom queue, honest alerts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.monitoring.rules import QueueDepth

from .conftest import run, run_json


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project directory on sys.path with a SQLite app module ``proj_jobs:app``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CONVEYOR_APP", raising=False)
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    (tmp_path / "proj_jobs.py").write_text(
        textwrap.dedent(
            f"""
            from conveyor import Conveyor
            app = Conveyor("sqlite:///{tmp_path}/proj.db")

            @app.task(queue="emails")
            def send(to: str) -> None: ...
            """
        )
    )
    yield tmp_path
    for name in ("proj_jobs", "broken_jobs", "missing_db_jobs"):
        sys.modules.pop(name, None)


def test_app_positional_option_or_env(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    producer = Conveyor(f"sqlite:///{project}/proj.db")
    producer.enqueue("send", ["a@x"], queue="emails")
    producer.close()
    for args in (["proj_jobs:app"], ["--app", "proj_jobs:app"]):
        for command in (["status"], ["jobs"], ["queues"], ["dlq", "list"], ["schedules", "list"]):
            result = run(*command, *args)
            assert result.exit_code == 0, (command, args, result.output)
        assert run_json("jobs", *args)["total"] == 1
    [job] = run_json("jobs", "proj_jobs:app")["items"]
    assert run_json("job", "proj_jobs:app", job["id"])["id"] == job["id"]
    assert run_json("job", job["id"], "proj_jobs:app")["id"] == job["id"]
    assert run_json("pause", "proj_jobs:app", "emails") == {"queue": "emails", "paused": True}
    monkeypatch.setenv("CONVEYOR_APP", "proj_jobs:app")
    assert run_json("jobs")["total"] == 1 and run_json("resume", "emails")["paused"] is False
    twice = run("status", "proj_jobs:app", "--app", "proj_jobs:app")
    assert twice.exit_code == 2 and "given twice" in twice.output


def test_worker_and_scheduler_take_app_the_same_ways(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "mem_jobs.py").write_text(
        "from conveyor import Conveyor\napp = Conveyor('memory://')\n"
    )
    for args in (["mem_jobs:app"], ["--app", "mem_jobs:app"]):
        result = run("worker", *args)
        assert result.exit_code == 2 and "memory://" in result.output, result.output
    monkeypatch.setenv("CONVEYOR_APP", "mem_jobs:app")
    assert "memory://" in run("worker").output
    monkeypatch.delenv("CONVEYOR_APP")
    for command in ("worker", "scheduler"):
        missing = run(command)
        assert missing.exit_code == 2 and "give your app" in missing.output
    sys.modules.pop("mem_jobs", None)


def test_version_and_did_you_mean() -> None:
    version = run("--version")
    assert version.exit_code == 0 and version.output.startswith("conveyor ")
    typo = run("stauts")
    assert typo.exit_code == 2 and "Did you mean 'status'" in typo.output
    option = run("jobs", "--stat", "pending")
    assert option.exit_code == 2 and "--state" in option.output


def test_app_module_errors_are_one_line(project: Path) -> None:
    (project / "broken_jobs.py").write_text("from conveyor import Conveyor\napp = Conveyor(\n")
    for command in (["status", "broken_jobs:app"], ["worker", "broken_jobs:app"]):
        result = run(*command)
        assert result.exit_code == 2, result.output
        assert "SyntaxError" in result.output and "broken_jobs.py, line" in result.output
        assert "Traceback" not in result.output
    (project / "broken_jobs.py").write_text("import no_such_module_at_all\n")
    sys.modules.pop("broken_jobs", None)
    result = run("jobs", "broken_jobs:app")
    assert result.exit_code == 2 and "ModuleNotFoundError" in result.output
    assert "Traceback" not in result.output


def test_read_commands_never_create_a_database(project: Path) -> None:
    (project / "missing_db_jobs.py").write_text(
        f"from conveyor import Conveyor\napp = Conveyor('sqlite:///{project}/nope.db')\n"
    )
    for command in (["status"], ["jobs"], ["dlq", "list"], ["queues"], ["pause", "default"]):
        bare = run(*command)  # the default sqlite:///conveyor.db of the current directory
        assert bare.exit_code == 2 and "no SQLite database at" in bare.output, bare.output
        assert "conveyor.db" in bare.output and not (project / "conveyor.db").exists()
        via_app = run(*command, "missing_db_jobs:app")
        assert via_app.exit_code == 2 and "no SQLite database at" in via_app.output
        assert "Traceback" not in via_app.output and not (project / "nope.db").exists()
        sys.modules.pop("missing_db_jobs", None)
    assert run("enqueue", "some.task", "--url", f"sqlite:///{project}/new.db").exit_code == 0


def test_unknown_queue_is_refused_not_created(project: Path) -> None:
    app = Conveyor(f"sqlite:///{project}/proj.db")
    app.enqueue("other", [1], queue="reports")
    bad = run("pause", "reprots", "proj_jobs:app")
    assert bad.exit_code == 1 and "unknown queue 'reprots'" in bad.output
    assert "did you mean reports" in bad.output
    assert app.broker.paused_queues() == set()
    assert run("resume", "nosuch", "proj_jobs:app").exit_code == 1
    assert run_json("pause", "emails", "proj_jobs:app")["paused"]  # declared by a task
    assert run_json("pause", "reports", "proj_jobs:app")["paused"]  # holds jobs
    assert run_json("pause", "later", "--force", "proj_jobs:app")["paused"]
    assert app.broker.paused_queues() == {"emails", "reports", "later"}
    assert run_json("resume", "later", "proj_jobs:app")["paused"] is False  # paused: known
    app.close()


def test_status_says_when_no_alert_rule_exists(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    out = run("status", target).output
    assert "No alert is firing" not in out and "No alert rules are configured" in out
    app.alerts.add_rule(QueueDepth(threshold=1000))
    assert "No alert is firing (1 rule(s) configured)" in run("status", target).output


def test_redis_persistence_warning_not_repeated_by_cli_commands(redis_server: object) -> None:
    """One-shot commands stay quiet; ``-v`` shows it (the worker and scheduler always do)."""
    env = {**os.environ, "CONVEYOR_URL": redis_server.url}  # type: ignore[attr-defined]
    env.pop("CONVEYOR_APP", None)
    command = [sys.executable, "-m", "conveyor.cli.main"]
    quiet = subprocess.run(
        [*command, "status"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "persistence is off" not in quiet.stderr + quiet.stdout
    loud = subprocess.run(
        [*command, "-v", "status"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert "persistence is off" in loud.stderr
