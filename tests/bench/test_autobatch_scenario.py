"""Issue 18: the harness's ``enqueue_autobatch`` scenario and the producer's ``--threads``.

The producer runs as the harness runs it (a subprocess, Conveyor's bench client) against the
session's real redis-server, with and without ``CONVEYOR_AUTOBATCH_MAX_JOBS``: every job is
stored once, and with auto-batching the server sees far fewer script calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from bench.harness.scenarios import QUICK, enqueue_autobatch

from conveyor import Conveyor

REPO = Path(__file__).resolve().parents[2]


def _produce(url: str, count: int, threads: int, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.harness.producer", "--client"]
    cmd += ["bench.peer_tasks.conveyor_tasks", "--url", url, "--op", "one"]
    cmd += ["--count", str(count), "--threads", str(threads)]
    path = f"{REPO / 'src'}{os.pathsep}{REPO}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    run = subprocess.run(
        cmd,
        cwd=REPO,
        env=base | {"PYTHONPATH": path} | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("autobatch", [False, True])
def test_threads_op_stores_every_job_once(redis_server: Any, autobatch: bool) -> None:
    app = Conveyor(redis_server.url)
    app.broker.flush_all()
    client = app.broker.client  # type: ignore[attr-defined]
    client.config_resetstat()
    env = {"CONVEYOR_AUTOBATCH_MAX_JOBS": "50"} if autobatch else {}
    out = _produce(redis_server.url, 400, 20, env)
    assert out["count"] == 400 and out["cpu_s"] > 0
    jobs = app.peek("default", 1000)
    assert sorted(j.args[0] for j in jobs) == list(range(400))
    calls = int(client.info("commandstats")["cmdstat_evalsha"]["calls"])
    if autobatch:
        assert calls <= 400 // 4, f"{calls} script calls for 400 jobs"
    else:
        assert calls >= 400
    app.broker.flush_all()
    app.close()


def test_the_scenario_is_conveyor_only() -> None:
    peer: Any = SimpleNamespace(name="bullmq")
    assert enqueue_autobatch(peer, QUICK) == {"skipped": "Conveyor's auto-batching producer only"}
