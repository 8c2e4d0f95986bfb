"""Reading the append-only job log written by :mod:`bench.peer_tasks.body`.

Lines are ``S <n> <start> <enqueue>`` and ``F <n> <finish>``. The reader is incremental (it
keeps its file offset), so polling a 20,000-job log every few milliseconds stays cheap.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


class WorkerDied(RuntimeError):
    """The worker process exited while the harness was waiting for jobs."""


@dataclass
class JobLog:
    """Incremental parser of one scenario's job log."""

    path: Path
    starts: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    enqueued_at: dict[int, float] = field(default_factory=dict)
    finishes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    first_start: float | None = None
    last_finish: float | None = None
    newly_done: list[int] = field(default_factory=list)
    _offset: int = 0
    _partial: bytes = b""

    def poll(self) -> int:
        """Read lines appended since the last call; return how many were read."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return 0
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            parts = raw.split()
            if len(parts) < 3:
                continue
            n = int(parts[1])
            t = float(parts[2])
            if parts[0] == b"S":
                self.starts[n].append(t)
                if len(parts) > 3 and n not in self.enqueued_at:
                    self.enqueued_at[n] = float(parts[3])
                if self.first_start is None or t < self.first_start:
                    self.first_start = t
            elif parts[0] == b"F":
                self.finishes[n] += 1
                if self.finishes[n] == 1:
                    self.newly_done.append(n)
                if self.last_finish is None or t > self.last_finish:
                    self.last_finish = t
        return len(lines)

    def finished(self, expected: Iterable[int]) -> int:
        """How many of ``expected`` have finished at least once."""
        return sum(1 for n in expected if self.finishes.get(n, 0) > 0)

    def wait_for(
        self,
        expected: range,
        timeout: float,
        *,
        stall: float | None = None,
        proc: subprocess.Popen[bytes] | None = None,
        poll_every: float = 0.05,
    ) -> bool:
        """Block until every job in ``expected`` finished; False on timeout or stall.

        ``stall``: give up early when nothing new was logged for that many seconds.
        ``proc``: raise :class:`WorkerDied` if this worker exits meanwhile.
        """
        deadline = time.monotonic() + timeout
        last_progress = time.monotonic()
        self.poll()
        done = self.finished(expected)
        self.newly_done.clear()
        while True:
            if self.poll():
                last_progress = time.monotonic()
                done += sum(1 for n in self.newly_done if n in expected)
                self.newly_done.clear()
            if done >= len(expected):
                return True
            now = time.monotonic()
            if now > deadline or (stall is not None and now - last_progress > stall):
                return False
            if proc is not None and proc.poll() is not None:
                self.poll()
                raise WorkerDied(f"worker exited with code {proc.returncode}")
            time.sleep(poll_every)

    def span(self, expected: range) -> float:
        """Seconds from the first start to the last finish among ``expected``."""
        starts = [ts[0] for n, ts in self.starts.items() if n in expected and ts]
        if not starts or self.last_finish is None:
            return math.nan
        return self.last_finish - min(starts)

    def lost(self, expected: Iterable[int]) -> list[int]:
        """Job numbers that never finished."""
        return [n for n in expected if self.finishes.get(n, 0) == 0]

    def duplicated(self, expected: Iterable[int]) -> list[int]:
        """Job numbers that were started more than once."""
        return [n for n in expected if len(self.starts.get(n, ())) > 1]

    def pickup_latencies(self, expected: Iterable[int]) -> list[float]:
        """Sorted first-start minus enqueue time, in seconds, for jobs that started."""
        return sorted(
            self.starts[n][0] - self.enqueued_at[n]
            for n in expected
            if self.starts.get(n) and n in self.enqueued_at
        )


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an already sorted list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]
