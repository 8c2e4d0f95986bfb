"""Real worker processes, real signals, real crashes — on every shared backend (SQLite, Redis).

Each test starts ``conveyor worker tests.worker.apps.jobs:app`` (a supervisor and its worker
processes), drives it with signals or ``kill -9`` and watches the jobs through the broker and the
tasks' O_APPEND execution log. Every wait polls with a deadline.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import pytest

from conveyor import JobState
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.slow


def test_sigterm_drains_in_flight_jobs_then_exits_0(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    w = env["worker"]("-c", "2", "--shutdown-timeout", "10")
    jobs = [app.enqueue("sleeper", args=[f"t{i}", 1.0]) for i in range(2)]
    wait_until(lambda: len(marks.of("t0")) + len(marks.of("t1")) == 2, timeout=15)
    w.signal(signal.SIGTERM)
    late = app.enqueue("sleeper", args=["late", 0.0])  # claimed by nobody: draining
    assert w.wait(timeout=8) == 0
    assert [j.refresh().state for j in jobs] == [JobState.COMPLETED] * 2
    assert late.refresh().state is JobState.PENDING and not marks.of("late")
    assert app.workers() == []
    assert "draining" in w.output()


def test_unfinished_jobs_are_released_and_run_by_the_next_worker(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    first = env["worker"]("-c", "2", "--shutdown-timeout", "1", "--visibility-timeout", "60")
    jobs = [app.enqueue("once_slow", args=[f"r{i}", 60]) for i in range(2)]
    wait_until(lambda: len(marks.of("r0")) + len(marks.of("r1")) == 2, timeout=15)
    began = time.monotonic()
    first.signal(signal.SIGINT)
    assert first.wait(timeout=8) == 0
    assert time.monotonic() - began < 5
    for job in jobs:
        snap = job.refresh()
        assert snap.state is JobState.PENDING and snap.attempts == 0
        assert snap.history[-1]["event"] == "released"
    env["worker"]("-c", "2")
    wait_until(lambda: all(j.refresh().state is JobState.COMPLETED for j in jobs), timeout=15)
    assert time.monotonic() - began < 30  # far sooner than the 60 s lease would have expired
    assert all(j.attempts == 1 for j in jobs)


def test_second_signal_releases_and_exits_now(env: dict[str, Any]) -> None:
    """Also the programmatic entry point: ``app.worker(processes=2).run()`` supervises too."""
    app, marks = env["app"], env["marks"]
    code = (
        "import sys; from tests.worker.apps.jobs import app; "
        "sys.exit(app.worker(processes=2, shutdown_timeout=60).run())"
    )
    w = env["worker"](command=[sys.executable, "-c", code])
    wait_until(lambda: len(app.workers()) == 2, timeout=15)
    job = app.enqueue("once_slow", args=["n", 60])
    wait_until(lambda: marks.of("n"), timeout=15)
    w.signal(signal.SIGTERM)
    wait_until(lambda: w.output().count("worker: SIGTERM: draining") == 2, timeout=5)
    began = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=5) == 0
    assert time.monotonic() - began < 3
    snap = job.refresh()
    assert snap.state is JobState.PENDING and snap.attempts == 0


def test_kill_9_job_returns_after_lease_expiry_and_runs_elsewhere(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    w = env["worker"]("--visibility-timeout", "2")
    job = app.enqueue("once_slow", args=["k", 60])
    wait_until(lambda: marks.of("k"), timeout=15)
    victim = marks.of("k")[0]["pid"]
    record = wait_until(lambda: next((r for r in app.workers() if r["pid"] == victim), None))
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    # Its registry record disappears within 2 x heartbeat interval (0.5 s here).
    wait_until(lambda: record["id"] not in {r["id"] for r in app.workers()}, timeout=2.5)
    wait_until(lambda: job.refresh().state is JobState.COMPLETED, timeout=15)
    reruns = marks.of("k")
    assert len(reruns) == 2 and reruns[1]["pid"] != victim
    assert reruns[1]["t"] - reruns[0]["t"] > 1.0  # waited for the lease to expire
    assert time.monotonic() - killed < 10
    assert job.lost == 1 and [e["kind"] for e in job.errors] == ["worker_lost"]
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=8) == 0


def test_poison_job_is_dead_lettered_as_worker_lost(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    w = env["worker"]("--visibility-timeout", "1", CONVEYOR_MAX_LOST="2")
    job = app.enqueue("suicide", args=["p"])
    wait_until(lambda: job.refresh().state is JobState.DEAD_LETTER, timeout=20)
    assert len(marks.of("p")) == 2 and job.lost == 2
    assert job.errors[-1]["kind"] == "worker_lost"
    assert len(w.child_pids()) >= 3  # the supervisor replaced each killed worker process
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=8) == 0


def test_thread_job_ignoring_its_timeout_recycles_the_process(env: dict[str, Any]) -> None:
    app, marks = env["app"], env["marks"]
    w = env["worker"]("-c", "2", "--visibility-timeout", "30")
    stuck = app.enqueue("blocking_sleep", args=["b", 6], max_attempts=1)  # task timeout: 1 s
    other = app.enqueue("once_slow", args=["o", 30])
    wait_until(lambda: marks.of("b") and marks.of("o"), timeout=15)
    began = time.monotonic()
    wait_until(lambda: stuck.refresh().state is JobState.DEAD_LETTER, timeout=5)
    assert time.monotonic() - began < 2.5  # 1 s timeout + 0.5 s grace (+ polling)
    assert stuck.errors[-1]["kind"] == "timeout"
    wait_until(lambda: other.refresh().state is JobState.COMPLETED, timeout=15)
    assert other.attempts == 1 and other.history[-1]["event"] == "released"
    assert "exited with code 4 (a job ignored its timeout)" in w.output()
    assert len(w.child_pids()) == 2
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=8) == 0


def test_no_supervisor_runs_in_one_process_and_drains_on_sigterm(env: dict[str, Any]) -> None:
    """``--no-supervisor``: the CLI process is the worker (no child), SIGTERM still drains."""
    app, marks = env["app"], env["marks"]
    w = env["worker"]("-c", "2", "--no-supervisor", "--shutdown-timeout", "10")
    job = app.enqueue("sleeper", args=["solo", 0.5])
    wait_until(lambda: len(marks.of("solo")) == 1, timeout=15)
    assert marks.of("solo")[0]["pid"] == w.pid, "the job must run in the CLI process itself"
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=8) == 0
    assert job.refresh().state is JobState.COMPLETED
