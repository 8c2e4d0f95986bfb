"""The app the reliability tests run in real worker processes.

Every execution appends to an append-only ledger OUTSIDE the broker (``RELIABILITY_LEDGER``):
``start <job-number> <pid> <time>`` when the handler begins and ``done <job-number> <pid> <time>``
when it returns. Each line is one ``write(2)`` on an ``O_APPEND`` descriptor, so lines from
concurrent processes never interleave, and a line is in the file the moment the call returns
(the page cache survives the death of the writer). The broker URL and every setting come from
``CONVEYOR_*`` environment variables.
"""

from __future__ import annotations

import os
import time

from conveyor import Conveyor

app = Conveyor()
_FD: int | None = None


def ledger(event: str, n: int) -> None:
    """Append ``event n pid time`` to the ledger in one atomic write."""
    global _FD
    if _FD is None:
        path = os.environ["RELIABILITY_LEDGER"]
        _FD = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_FD, f"{event} {n} {os.getpid()} {time.time():.6f}\n".encode())


@app.task(max_attempts=20)
def work(n: int, seconds: float) -> int:
    """A short job: record the start, sleep ``seconds``, record the end; returns the pid."""
    ledger("start", n)
    time.sleep(seconds)
    ledger("done", n)
    return os.getpid()


@app.task(max_attempts=20)
def poison(n: int) -> None:
    """A poison pill: kills the worker process that runs it, every time."""
    ledger("start", n)
    os._exit(17)


@app.task(max_attempts=20)
def part(n: int, seconds: float) -> int:
    """A chord member (issue 16): records its run like ``work``; returns ``n``."""
    ledger("start", n)
    time.sleep(seconds)
    ledger("done", n)
    return n


@app.task(max_attempts=20)
def gather(results: list[int]) -> int:
    """A chord callback: records ``callback <how many results> <pid> <time>``; returns that."""
    ledger("callback", len(results))
    return len(results)
