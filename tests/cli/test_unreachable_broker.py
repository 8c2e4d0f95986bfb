"""A broker that cannot be reached: every one-shot command says so in one line and exits 1.

Real clients against a closed port (nothing listens there): Redis connects lazily, at the
first command; PostgreSQL when the app is built. Neither may end in a traceback, a usage
banner or a message spread over several lines, and the exit code is the same for both
(docs/monitoring.md, "Command line").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.redis_proc import free_port

from .conftest import run

ROOT = Path(__file__).resolve().parents[2]

#: Every one-shot command that reads or acts on the broker (the daemons retry on their own).
COMMANDS = [
    ["status"],
    ["queues"],
    ["jobs"],
    ["job", "abc"],
    ["dlq", "list"],
    ["dlq", "requeue", "abc"],
    ["dlq", "purge", "--yes"],
    ["history"],
    ["limits", "show"],
    ["limits", "set", "rate:add", "5/s"],
    ["limits", "clear", "rate:add"],
    ["schedules", "list"],
    ["schedules", "next", "nightly"],
    ["schedules", "history", "nightly"],
    ["schedules", "pause", "nightly"],
    ["schedules", "resume", "nightly"],
    ["schedules", "remove", "nightly"],
    ["pause", "default", "--force"],
    ["resume", "default"],
    ["enqueue", "add", "--args", "[1, 2]"],
    ["cancel", "abc"],
    ["retry", "abc"],
    ["clear", "default", "--yes"],
    ["bulk", "retry", "--state", "dead_letter"],
    ["run-now", "abc"],
    ["quiet", "w1"],
    ["stop", "w1"],
]


def closed_url(kind: str) -> str:
    """A broker URL on a loopback port nothing listens on (with a password to keep secret)."""
    port = free_port()
    if kind == "redis":
        return f"redis://:hunter2-secret@127.0.0.1:{port}/0?socket_connect_timeout=2"
    pytest.importorskip("psycopg")
    return f"postgresql://conveyor:hunter2-secret@127.0.0.1:{port}/conveyor?connect_timeout=2"


@pytest.mark.parametrize("kind", ["redis", "postgres"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unreachable_broker_is_one_line_and_exit_1(kind: str, command: list[str]) -> None:
    result = run(*command, "--url", closed_url(kind))  # an escaping exception fails the test
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "unavailable" in lines[0] or "connection failed" in lines[0], lines[0]
    assert "hunter2" not in result.output


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_the_installed_command_prints_no_traceback(kind: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for command in (["limits", "show"], ["schedules", "list"], ["status"]):
        proc = subprocess.run(
            [sys.executable, "-m", "conveyor.cli.main", *command, "--url", closed_url(kind)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=ROOT,
        )
        assert proc.returncode == 1, (command, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (command, proc.stderr[-2000:])
        assert len(proc.stderr.strip().splitlines()) == 1, (command, proc.stderr)
        assert proc.stdout == "", (command, proc.stdout)


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_bench_demo_and_migrate_end_in_one_line_too(kind: str) -> None:
    """Commands that print progress first (``bench``, ``demo``) or talk to the database
    themselves (``migrate``): the error is still one line on stderr, exit 1."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    commands = [["bench", "--jobs", "100"], ["demo", "--jobs", "10"]]
    if kind == "postgres":
        commands.append(["migrate"])
    for command in commands:
        proc = subprocess.run(
            [sys.executable, "-m", "conveyor.cli.main", *command, "--url", closed_url(kind)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
        assert proc.returncode == 1, (command, proc.returncode, proc.stderr[-2000:])
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (command, proc.stderr)
        assert "hunter2" not in proc.stderr + proc.stdout, command
