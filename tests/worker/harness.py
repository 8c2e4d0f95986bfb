"""Start real ``conveyor worker`` processes for tests and read what they did.

Each worker runs ``tests.worker.apps.jobs:app`` with the broker URL and short intervals passed
through the environment; the tasks append JSON lines to an O_APPEND log (``Marks``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from tests.worker.conftest import wait_until

REPO = Path(__file__).resolve().parents[2]
CONVEYOR = str(Path(sys.executable).parent / "conveyor")
APP = "tests.worker.apps.jobs:app"
FAST_ENV = {
    "CONVEYOR_POLL_INTERVAL": "0.05",
    "CONVEYOR_HEARTBEAT_INTERVAL": "0.5",
    "CONVEYOR_REAP_INTERVAL": "0.2",
    "CONVEYOR_TIMEOUT_GRACE": "0.5",
}


class Marks:
    """The tasks' execution log."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[dict[str, Any]]:
        """Every line so far."""
        if not self.path.exists():
            return []
        return [orjson.loads(line) for line in self.path.read_bytes().splitlines() if line]

    def of(self, tag: str, event: str = "start") -> list[dict[str, Any]]:
        """Lines of one job tag and event."""
        return [m for m in self.read() if m["tag"] == tag and m["event"] == event]


class WorkerProcess:
    """``conveyor worker APP ...`` (or ``command``) as a real process: the supervisor."""

    def __init__(
        self,
        url: str,
        tmp: Path,
        *args: str,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.log_path = tmp / f"worker-{time.monotonic_ns()}.err"
        environ = {
            **os.environ,
            **FAST_ENV,
            "CONVEYOR_URL": url,
            "WORKER_TEST_LOG": str(tmp / "marks.jsonl"),
            **(env or {}),
        }
        environ["PYTHONPATH"] = str(REPO) + os.pathsep + environ.get("PYTHONPATH", "")
        with open(self.log_path, "wb") as err:
            self.proc = subprocess.Popen(
                command or [CONVEYOR, "worker", APP, *args],
                cwd=REPO,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
            )

    @property
    def pid(self) -> int:
        """The supervisor's pid."""
        return self.proc.pid

    def output(self) -> str:
        """Everything logged so far."""
        return self.log_path.read_text(errors="replace")

    def child_pids(self) -> list[int]:
        """Worker process pids the supervisor started, oldest first."""
        pids = []
        for line in self.output().splitlines():
            if "conveyor.supervisor: worker process" in line and "started (slot" in line:
                pids.append(int(line.split("worker process ")[1].split()[0]))
        return pids

    def wait_ready(self, count: int = 1, timeout: float = 15.0) -> None:
        """Until ``count`` worker processes logged that they run."""
        wait_until(lambda: self.output().count("concurrency=") >= count, timeout=timeout)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Send a signal to the supervisor."""
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Wait for the supervisor to exit; its exit code."""
        return self.proc.wait(timeout)

    def close(self) -> None:
        """Kill the supervisor and its children if still alive (test teardown)."""
        for pid in [*self.child_pids(), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
