"""The one job body every system runs, and the append-only log it writes.

Each execution appends two lines to the file named by ``$BENCH_LOG`` (opened with
``O_APPEND``, one ``os.write`` per line, so concurrent threads and processes never interleave
inside a line):

    S <n> <start time.time()> <enqueue time.time()>
    F <n> <finish time.time()>

The harness reads the log to measure drain/IO rates, pickup latency (start - enqueue) and, Jepsen
style, lost jobs (enqueued numbers never finished) and duplicates (numbers started twice).
Standard library only: this module is imported inside every peer's worker.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

_lock = threading.Lock()
_fd: int | None = None
_fd_pid: int | None = None


def _log_fd() -> int:
    """Return this process's O_APPEND descriptor for ``$BENCH_LOG`` (re-opened after fork)."""
    global _fd, _fd_pid
    pid = os.getpid()
    if _fd is None or _fd_pid != pid:
        with _lock:
            if _fd is None or _fd_pid != pid:
                path = os.environ["BENCH_LOG"]
                _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                _fd_pid = pid
    return _fd


def record(line: str) -> None:
    """Append one line (must end with a newline) atomically to the job log."""
    os.write(_log_fd(), line.encode())


def run_sync(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """Job body for thread/process based systems: log start, optionally sleep, log finish."""
    record(f"S {n} {time.time():.6f} {t_enq:.6f}\n")
    if sleep_s > 0:
        time.sleep(sleep_s)
    record(f"F {n} {time.time():.6f}\n")


async def run_async(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """Job body for asyncio systems (arq, SAQ): same log lines, ``asyncio.sleep`` for I/O."""
    record(f"S {n} {time.time():.6f} {t_enq:.6f}\n")
    if sleep_s > 0:
        await asyncio.sleep(sleep_s)
    record(f"F {n} {time.time():.6f}\n")
