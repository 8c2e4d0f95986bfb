"""The supervisor and the ``conveyor worker`` command: several processes, restarts, recycling,
pause/resume across processes, JSON logs, Prometheus metrics and bad input."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner

from conveyor import JobState
from conveyor.cli.main import cli
from tests.worker.conftest import wait_until
from tests.worker.harness import free_port

pytestmark = pytest.mark.slow


def test_processes_registry_restart_and_pause_resume(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    w = env["worker"]("-p", "2", "-c", "2", "--queues", "high:5,default")
    records = wait_until(lambda: len(app.workers()) == 2 and app.workers(), timeout=15)
    pids = {r["pid"] for r in records}
    assert len(pids) == 2 and w.pid not in pids
    for record in records:
        assert record["queues"] == ["high", "default"] and record["concurrency"] == 2
        assert record["rss"] < 80 * 2**20  # idle worker process (target: <= 50 MB, see bench/)
    # Pause: no worker claims from the queue; resume: one does within a second.
    app.pause("default")
    job = app.enqueue("sleeper", args=["paused", 0.0])
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        assert job.refresh().state is JobState.PENDING
        time.sleep(0.05)
    resumed = time.monotonic()
    app.resume("default")
    wait_until(lambda: marks.of("paused"), timeout=3)
    assert time.monotonic() - resumed < 1.5
    # A worker process that dies is replaced.
    victim = records[0]["pid"]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(w.child_pids()) == 3, timeout=5)

    def live() -> set[int]:
        return {r["pid"] for r in app.workers()}

    wait_until(lambda: len(live()) == 2 and victim not in live(), timeout=5)
    assert live() <= set(w.child_pids())
    # SIGHUP recycles every worker process; the supervisor stays.
    w.signal(signal.SIGHUP)
    wait_until(lambda: len(w.child_pids()) == 5, timeout=10)
    wait_until(lambda: live() == set(w.child_pids()[3:]), timeout=5)
    # A supervisor killed with -9: its worker processes notice, drain and leave the registry.
    orphans = w.child_pids()[3:]
    os.kill(w.pid, signal.SIGKILL)
    wait_until(lambda: app.workers() == [], timeout=5)
    wait_until(lambda: not any(_alive(pid) for pid in orphans), timeout=5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:  # a zombie (exited, not reaped) is not alive
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_max_jobs_per_child_recycles(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    w = env["worker"]("-c", "1", "--max-jobs-per-child", "2")
    jobs = [app.enqueue("sleeper", args=[f"m{i}", 0.0]) for i in range(5)]
    wait_until(lambda: all(j.refresh().state is JobState.COMPLETED for j in jobs), timeout=20)
    ran_in = {marks.of(f"m{i}")[0]["pid"] for i in range(5)}
    assert len(ran_in) == 3  # 2 + 2 + 1
    assert "exited with code 3 (job limit reached)" in w.output()
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0


def test_max_memory_per_child_recycles(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    w = env["worker"]("--max-memory-per-child", "120")
    job = app.enqueue("hog", args=["h", 150])
    wait_until(lambda: job.refresh().state is JobState.COMPLETED, timeout=15)
    wait_until(lambda: len(w.child_pids()) == 2, timeout=10)
    assert "MB (limit 120 MB): recycling it" in w.output()
    after = app.enqueue("sleeper", args=["after", 0.0])
    wait_until(lambda: after.refresh().state is JobState.COMPLETED, timeout=15)
    assert marks.of("after")[0]["pid"] == w.child_pids()[1]
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0


def test_json_logs_and_metrics_endpoint(env: dict[str, Any]) -> None:
    app = env["app"]
    port = free_port()
    w = env["worker"](
        "--log-format",
        "json",
        "--log-level",
        "debug",
        "--metrics-port",
        str(port),
        "--metrics-host",
        "127.0.0.1",
    )
    job = app.enqueue("sleeper", args=["j", 0.0])
    wait_until(lambda: job.refresh().state is JobState.COMPLETED, timeout=15)
    line = wait_until(
        lambda: next((json.loads(x) for x in w.output().splitlines() if '"outcome"' in x), None),
        timeout=5,
    )
    assert line["job_id"] == job.id and line["outcome"] == "completed"
    assert line["task"] == "sleeper" and line["queue"] == "default" and line["attempt"] == 1
    assert line["worker"] and isinstance(line["duration"], float)
    assert all(json.loads(x) for x in w.output().splitlines() if x.strip())  # every line is JSON
    body = wait_until(lambda: _get(f"http://127.0.0.1:{port}/metrics"), timeout=5)
    assert "conveyor_jobs" in body
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope_module:app"], "cannot import"),
        (["tests.worker.apps.jobs:app", "--queues", "high:x"], "weight"),
        (["tests.worker.apps.jobs:app", "--concurrency", "0"], "concurrency"),
        (["tests.worker.apps.jobs:app", "--log-format", "xml"], "log-format"),
        (["tests.worker.apps.jobs:missing"], "not a Conveyor app"),
        (["tests.worker.apps.memory_app:app"], "memory://"),
    ],
)
def test_cli_refuses_bad_input(
    args: list[str], message: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path / 'x.db'}")
    result = CliRunner().invoke(cli, ["worker", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
