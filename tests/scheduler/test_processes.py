"""Real processes: three ``conveyor scheduler`` processes, one killed -9 and restarted mid-way,
an every-second schedule: every tick exists exactly once (none missing, none doubled)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor
from tests.support.backends import BACKENDS

pytestmark = pytest.mark.slow

APP_MODULE = '''
import os
from conveyor import Conveyor

app = Conveyor(os.environ["CONVEYOR_URL"])


@app.every(1, name="beat")
def beat() -> None:
    """Every second."""
'''

REAL_BACKENDS = [name for name in ("redis", "sqlite", "postgres") if name in BACKENDS]


@pytest.fixture(params=REAL_BACKENDS)
def shared_url(request: Any, tmp_path: Path) -> Iterator[str]:
    """A broker URL that several processes can share, emptied first."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url.rsplit("/", 1)[0] + "/7"
    elif request.param == "postgres":
        url = request.getfixturevalue("pg_server").new_database()
    else:
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    app = Conveyor(url)
    app.broker.flush_all()
    app.close()
    yield url


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_three_scheduler_processes_with_a_kill_9(shared_url: str, tmp_path: Path) -> None:
    (tmp_path / "beat_app.py").write_text(APP_MODULE)
    conveyor = Path(sys.executable).parent / "conveyor"
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "CONVEYOR_URL": shared_url, "PYTHONPATH": path}  # keep the tree's src
    logs: list[Path] = []

    def start() -> subprocess.Popen[bytes]:
        log = tmp_path / f"scheduler-{len(logs)}.log"
        logs.append(log)
        with log.open("wb") as out:
            return subprocess.Popen(
                [str(conveyor), "scheduler", "beat_app:app", "--interval", "0.2"],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    reader = Conveyor(shared_url)

    def fires() -> Counter[float]:
        page = reader.search(task="beat", page_size=1000)
        return Counter(float(j.metadata["fire_at"]) for j in page.items)

    procs = [start() for _ in range(3)]
    try:
        _wait_until(lambda: len(fires()) >= 4, 30, "the first ticks")
        # Kill the scheduler that enqueued the latest tick: the others must take over.
        latest = next(e for e in reader.schedules.history("beat") if e["outcome"] == "enqueued")
        victim = next(i for i, p in enumerate(procs) if f"-{p.pid}-" in latest["scheduler"])
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(timeout=10)
        _wait_until(lambda: len(fires()) >= 7, 30, "ticks with one scheduler dead")
        procs[victim] = start()
        _wait_until(lambda: len(fires()) >= 13, 30, "ticks after the restart")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=15) for proc in procs]
    output = "\n".join(f"--- {p.name}\n{p.read_text()}" for p in logs)
    assert codes == [0, 0, 0], output
    counts = fires()
    times = sorted(counts)
    assert set(counts.values()) == {1}, f"doubled ticks: {counts}"
    assert times == [times[0] + k for k in range(len(times))], f"missing ticks: {times}"
    assert len(times) >= 13
    history = reader.schedules.history("beat", 1000)
    by_scheduler = Counter(e["scheduler"] for e in history if e["outcome"] == "enqueued")
    assert len(by_scheduler) >= 2, by_scheduler  # another scheduler took over
    reader.close()
