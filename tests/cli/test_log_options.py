"""``--log-format json`` on ``conveyor scheduler`` and ``conveyor dashboard`` (issue 19 item 7).

Both run as real processes; every line they write to stderr is one JSON object, their own
lines included (before, they had no such option: plain text from ``logging.basicConfig``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.worker.conftest import wait_until
from tests.worker.harness import CONVEYOR, REPO, free_port

pytestmark = pytest.mark.slow


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    err = tmp_path / f"{args[0]}.err"
    env = {
        **os.environ,
        "CONVEYOR_URL": f"sqlite:///{tmp_path / 'jobs.db'}",
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    with open(err, "wb") as fh:
        proc = subprocess.Popen(
            [CONVEYOR, *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )
    return proc, err


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def test_scheduler_logs_json(tmp_path: Path) -> None:
    proc, err = start(tmp_path, "scheduler", "tests.worker.apps.jobs:app", "--log-format", "json")
    try:
        line = wait_until(
            lambda: next((r for r in json_lines(err) if "started" in r["msg"]), None), timeout=20
        )
        assert line["logger"].startswith("conveyor.scheduler") and line["level"] == "info"
    finally:
        stop(proc)
    assert all(isinstance(r, dict) for r in json_lines(err))  # every line parses


def test_dashboard_logs_json(tmp_path: Path) -> None:
    port = str(free_port())
    proc, err = start(
        tmp_path, "dashboard", "tests.worker.apps.jobs:app", "--port", port, "--log-format", "json"
    )
    try:
        line = wait_until(
            lambda: next((r for r in json_lines(err) if "authentication" in r["msg"]), None),
            timeout=20,
        )
        assert line["level"] == "warning" and line["logger"] == "conveyor.dashboard"
    finally:
        stop(proc)


def test_dashboard_server_lines_are_json_too(tmp_path: Path) -> None:
    """uvicorn's own loggers go through the same handler (before: plain text lines)."""
    import socket

    port = free_port()
    proc, err = start(
        tmp_path,
        "dashboard",
        "tests.worker.apps.jobs:app",
        "--port",
        str(port),
        "--log-format",
        "json",
    )
    try:
        wait_until(lambda: any("authentication" in r["msg"] for r in json_lines(err)), timeout=20)

        def connect() -> socket.socket | None:
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                return None  # not listening yet

        with wait_until(connect, timeout=20) as sock:
            sock.sendall(b"\x00 not http at all\r\n\r\n")  # uvicorn warns: invalid HTTP request
            with contextlib.suppress(OSError):
                sock.recv(1024)
        line = wait_until(
            lambda: next((r for r in json_lines(err) if r["logger"].startswith("uvicorn")), None),
            timeout=20,
        )
        assert line["level"] == "warning" and "Invalid HTTP request" in line["msg"]
    finally:
        stop(proc)
    assert all(isinstance(r, dict) for r in json_lines(err))
