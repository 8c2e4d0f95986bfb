"""A test app whose tasks record each start and end in an O_APPEND log file.

The broker URL comes from ``CONVEYOR_URL`` and every setting from ``CONVEYOR_*`` variables;
``WORKER_TEST_LOG`` names the log file. Each line is JSON: event, job tag, pid, time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import orjson

from conveyor import Conveyor

# the workers get CONVEYOR_URL; imported by the test process itself (for its task objects)
# without one, it must not create the embedded default conveyor.db in the working directory
app = Conveyor(os.environ.get("CONVEYOR_URL") or "memory://")


def mark(event: str, tag: str, **extra: Any) -> None:
    """Append one JSON line atomically (O_APPEND, one write)."""
    path = os.environ.get("WORKER_TEST_LOG")
    if not path:
        return
    line = (
        orjson.dumps({"event": event, "tag": tag, "pid": os.getpid(), "t": time.time(), **extra})
        + b"\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task(max_attempts=5)
def sleeper(tag: str, seconds: float) -> str:
    """Sleep in small steps (so it can be interrupted), recording start and end."""
    mark("start", tag)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
    mark("end", tag)
    return tag


@app.task
async def async_sleeper(tag: str, seconds: float) -> str:
    """The asyncio version of ``sleeper``."""
    mark("start", tag)
    await asyncio.sleep(seconds)
    mark("end", tag)
    return tag


@app.task(executor="process")
def proc_sleeper(tag: str, seconds: float) -> int:
    """Runs in the process pool; returns its pid."""
    mark("start", tag)
    time.sleep(seconds)
    mark("end", tag)
    return os.getpid()


@app.task(timeout=1, max_attempts=1)
def blocking_sleep(tag: str, seconds: float) -> str:
    """One long C-level sleep: ignores JobTimeout until it returns (forces a recycle)."""
    mark("start", tag)
    time.sleep(seconds)
    mark("end", tag)
    return tag


def _started_before(tag: str) -> bool:
    path = os.environ.get("WORKER_TEST_LOG")
    if not path or not os.path.exists(path):
        return False
    with open(path, "rb") as fh:
        return any(orjson.loads(line).get("tag") == tag for line in fh if line.strip())


@app.task(max_attempts=5)
def once_slow(tag: str, seconds: float) -> int:
    """Slow on its first run only (a rerun after a release or a crash finishes at once)."""
    slow = not _started_before(tag)
    mark("start", tag)
    deadline = time.monotonic() + (seconds if slow else 0.0)
    while time.monotonic() < deadline:
        time.sleep(0.02)
    mark("end", tag)
    return os.getpid()


@app.task(max_attempts=10)
def suicide(tag: str) -> None:
    """Kill the worker process that runs it (a poison pill)."""
    mark("start", tag)
    os.kill(os.getpid(), 9)


_HOG: list[bytes] = []


@app.task
def hog(tag: str, megabytes: int) -> int:
    """Keep ``megabytes`` of memory alive in this process."""
    mark("start", tag)
    _HOG.append(os.urandom(1024) * (megabytes * 1024))
    return os.getpid()


chat_log = logging.getLogger("tests.worker.apps.chat")  # the user's own logger


@app.task(max_attempts=1)
def chatty(tag: str, fail: bool = False) -> str:
    """Log through the user's own logger (INFO and WARNING); fail when asked."""
    chat_log.info("chatty says %s", tag)
    chat_log.warning("chatty warns\nforged: %s", tag)
    if fail:
        raise ValueError(f"chatty failed {tag}")
    return tag


@app.task(executor="process")
def proc_chatty(tag: str) -> int:
    """``chatty`` in the process pool: returns the child's pid."""
    chat_log.info("proc_chatty says %s", tag)
    return os.getpid()
