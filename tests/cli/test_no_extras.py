"""Issue 19: every command that does not serve HTTP works without the optional extras.

The commands run in a fresh interpreter where ``prometheus_client``, ``starlette``, ``uvicorn``
and ``jinja2`` cannot be imported (a meta-path blocker, as if ``pip install conveyor-jobs`` had
installed no extra), on a real SQLite file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conveyor import Conveyor
from conveyor.cli.worker_cmd import worker_command
from conveyor.config import Settings

from .conftest import run

BLOCKER = """
import sys
BLOCKED = ("prometheus_client", "starlette", "uvicorn", "jinja2")

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from conveyor.cli.main import main
sys.argv = ["conveyor", *sys.argv[1:]]
main()
"""


def conveyor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_commands_work_without_the_dashboard_extra(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/bare.db"
    app = Conveyor(url)
    job_id = app.enqueue("some.task", [1]).id
    app.close()
    env = {**os.environ, "CONVEYOR_URL": url, "COLUMNS": "120"}
    env.pop("CONVEYOR_APP", None)
    assert "needs its extra" in conveyor("dashboard", env=env).stderr  # the blocker works
    for command in (
        ["status"],
        ["jobs"],
        ["job", job_id],
        ["dlq", "list"],
        ["queues"],
        ["pause", "default"],
        ["resume", "default"],
        ["enqueue", "some.task", "--args", "[2]"],
        ["schedules", "list"],
        ["cancel", job_id],
        ["--version"],
        ["worker", "--help"],
        ["scheduler", "--help"],
    ):
        result = conveyor(*command, env=env)
        assert result.returncode == 0, (command, result.stderr[-2000:])
        assert "ModuleNotFoundError" not in result.stderr + result.stdout


def test_worker_help_shows_the_real_defaults() -> None:
    text = run("worker", "--help").output
    lease = Settings().visibility_timeout
    assert f"CONVEYOR_VISIBILITY_TIMEOUT or {lease:g}]" in " ".join(text.split())
    shutdown = f"{Settings().shutdown_timeout:g}]"
    assert shutdown in " ".join(text.split()).split("finish after SIGTERM")[1][:80]
    assert any(p.name == "app_target" for p in worker_command.params)
    assert "--app" in text  # the app is given the same way as to every other command
