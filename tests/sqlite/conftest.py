"""Helpers for the SQLite tests: fresh files, child processes, deadlines (no fixed sleeps)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor.broker.sqlite import SqliteBroker
from conveyor.config import Retention

T0 = 1_700_000_000.0
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """A path for a fresh SQLite file in the test's temp dir."""
    return str(tmp_path / "jobs.db")


@pytest.fixture
def sbroker(db_path: str) -> Iterator[SqliteBroker]:
    """A fresh SqliteBroker with default retention."""
    broker = SqliteBroker(db_path, Retention())
    yield broker
    broker.close()


Spawn = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """``spawn(name, source, *args)``: run dedented Python ``source`` as a child process (stdout
    piped, stderr to a file); every child still alive at teardown is killed by its pid."""
    children: list[subprocess.Popen[str]] = []

    def start(name: str, source: str, *args: str) -> subprocess.Popen[str]:
        script = tmp_path / f"{name}.py"
        script.write_text(textwrap.dedent(source))
        env = dict(os.environ, PYTHONPATH=SRC, PYTHONUNBUFFERED="1")
        with open(tmp_path / f"{name}.err", "w") as err:
            proc = subprocess.Popen(
                [sys.executable, str(script), *args],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
            )
        proc.err_path = tmp_path / f"{name}.err"  # type: ignore[attr-defined]
        children.append(proc)
        return proc

    yield start
    for proc in children:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _stderr(proc: subprocess.Popen[str]) -> str:
    path = getattr(proc, "err_path", None)
    return Path(path).read_text()[-4000:] if path else ""


def wait_for_line(
    proc: subprocess.Popen[str], wanted: str, timeout: float = 60.0, count: int = 1
) -> str:
    """Read ``proc``'s stdout until ``count`` lines contain ``wanted``; fail after ``timeout`` s.

    Returns the last matching line. Output read past it is consumed."""
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0:
            if not sel.select(remaining):
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                code = proc.wait()
                pytest.fail(f"child exited ({code}) before printing {wanted!r}:\n{_stderr(proc)}")
            buf += chunk
            hits = [line for line in buf.decode(errors="replace").splitlines() if wanted in line]
            if len(hits) >= count:
                return hits[count - 1]
    pytest.fail(f"no {wanted!r} from the child within {timeout} s")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every 20 ms until it holds; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def finish(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """Wait for a child to exit 0 and return its stdout (its stderr on failure)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"child did not finish within {timeout} s:\n{_stderr(proc)}")
    assert proc.returncode == 0, _stderr(proc)
    return out
