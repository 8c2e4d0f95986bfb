"""Flow control (issue 15) across real worker processes sharing SQLite, PostgreSQL or Redis.

The jobs append to a ledger (O_APPEND); the assertions read only the ledger and the broker.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tests.worker.conftest import wait_until

APP = "tests.worker.apps.flow:app"
CONVEYOR = str(Path(sys.executable).parent / "conveyor")


def _worker(env: dict[str, Any], queue: str, vt: str = "10") -> Any:
    command = [CONVEYOR, "worker", APP, "-q", queue, "-c", "4", "--visibility-timeout", vt]
    return env["worker"](command=command)


def test_rate_limit_holds_across_two_worker_processes(env: dict[str, Any]) -> None:
    from tests.worker.apps.flow import rated

    app, marks = env["app"], env["marks"]
    app.tasks[rated.name] = rated
    jobs = [app.enqueue("flow.rated", [f"r{i}"], queue="rated") for i in range(50)]
    for _ in range(2):
        _worker(env, "rated")
    wait_until(lambda: len([m for m in marks.read() if m["event"] == "start"]) >= 50, timeout=30)
    starts = sorted(m["t"] for m in marks.read() if m["event"] == "start")
    assert len({m["tag"] for m in marks.read()}) == 50 and len(starts) == 50
    burst = 10
    for i, t in enumerate(starts):  # every one-second window, starting at each start
        in_window = sum(1 for u in starts[i:] if u < t + 1.0)
        assert in_window <= 10 + burst, (i, in_window)
    assert starts[-1] - starts[0] >= 3.0, "50 jobs at 10/s (10 at once) take about 4 s"
    wait_until(lambda: all(str(j.refresh().state) == "completed" for j in jobs), timeout=15)


def test_concurrency_limit_per_key_across_processes_and_kill_9(env: dict[str, Any]) -> None:
    from tests.worker.apps.flow import exclusive

    app, marks = env["app"], env["marks"]
    if os.environ.get("FLOW_TEST_UNLIMITED") != "1":  # set it to see this test fail
        app.tasks[exclusive.name] = exclusive  # the producer evaluates the limit keys
    jobs = [  # each key's ten jobs side by side: without the limit they would overlap
        app.enqueue("flow.exclusive", [f"k{i // 10}", f"e{i}", 0.05], queue="exclusive")
        for i in range(200)
    ]
    first = _worker(env, "exclusive", vt="2")
    _worker(env, "exclusive", vt="2")
    wait_until(lambda: len(marks.read()) >= 40, timeout=30)
    victims = first.child_pids()
    assert victims
    os.kill(victims[-1], signal.SIGKILL)  # its running jobs' keys free when their leases end
    done = lambda: all(str(j.refresh().state) == "completed" for j in jobs)  # noqa: E731
    wait_until(done, timeout=90, interval=0.2)
    by_key: dict[str, list[tuple[float, float, str]]] = {}
    started: dict[str, dict[str, Any]] = {}
    for m in marks.read():
        if m["event"] == "start":
            started[m["tag"] + str(m["pid"])] = m
        elif m["event"] == "end":
            s = started.pop(m["tag"] + str(m["pid"]))
            by_key.setdefault(m["key"], []).append((s["t"], m["t"], m["tag"]))
    for key, spans in by_key.items():
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            assert start >= end - 0.005, f"{key}: {a} and {b} overlap"
    assert {m["tag"] for m in marks.read() if m["event"] == "end"} == {f"e{i}" for i in range(200)}
