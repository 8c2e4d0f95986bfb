"""Conveyor on its other backends: a SQLite file and the in-memory broker (no peers there).

``conveyor-sqlite`` runs every scenario exactly as the Redis adapter does, with the store URL
``sqlite:///<scratch>/conveyor-bench.db`` instead of the harness's Redis; "flush" deletes the
file. ``conveyor-memory`` cannot share a queue between processes, so the producer measures
enqueue and bulk against its own in-memory broker, and the drain and I/O scenarios start
:mod:`bench.harness.embedded`, which fills the queue in the worker's own process before
running ``conveyor worker --no-supervisor`` there. Latency, idle RSS and the crash check need a
second process to reach the queue (or, for the crash check, a queue that survives one) and are
skipped for memory. Their figures are absolute: the report shows them in their own table.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import ClassVar

from bench.harness.adapter import ProducerResult
from bench.harness.conveyor import ConveyorAdapter


class ConveyorSqliteAdapter(ConveyorAdapter):
    """Conveyor's CLI worker on a SQLite file in the harness's scratch directory."""

    name = "conveyor-sqlite"
    db = 0  # unused: nothing of this system lives in Redis
    uses_redis = False
    bulk_api = "app.enqueue_many (one transaction per batch)"
    tuning_modes: ClassVar[tuple[str, ...]] = ("c16", "c64")

    @property
    def db_path(self) -> Path:
        """The SQLite file every producer and worker of this run opens."""
        return self.ctx.workdir / "conveyor-bench.db"

    @property
    def redis_url(self) -> str:
        """The store URL (the base class's name for it is historical)."""
        return f"sqlite:///{self.db_path}"

    def flush(self) -> None:
        """Delete the database file and its WAL (no worker or producer is running here)."""
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{self.db_path}{suffix}").unlink()


class ConveyorMemoryAdapter(ConveyorAdapter):
    """Conveyor's in-memory broker: producer-side rates, and a drain inside one process."""

    name = "conveyor-memory"
    db = 0
    uses_redis = False
    bulk_api = "app.enqueue_many"
    supported_scenarios: ClassVar[tuple[str, ...] | None] = ("enqueue", "bulk", "drain", "io")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._pending: tuple[int, float] = (0, 0.0)
        self._prefill_env: dict[str, str] = {}

    @property
    def redis_url(self) -> str:
        """Every process gets its own empty in-memory broker."""
        return "memory://"

    def flush(self) -> None:
        """Nothing to flush: the queue dies with the process that filled it."""
        self._pending = (0, 0.0)

    def prefill(self, count: int, *, start: int = 0, sleep_s: float = 0.0) -> ProducerResult:
        """Remember the jobs; the next worker enqueues them in its own process first."""
        if start:
            raise ValueError("conveyor-memory: prefill must start at job 0")
        self._pending = (count, sleep_s)
        return ProducerResult(count=count, elapsed=0.0, rate=float("nan"), api="in the worker")

    def worker_command(self, mode: str) -> list[str]:
        """``python -m bench.harness.embedded`` + the worker options of ``mode``."""
        argv = super().worker_command(mode)
        options = [a for a in argv[3:] if a != "--no-supervisor"]
        return [str(self.python), "-m", "bench.harness.embedded", argv[2], *options]

    def start_worker(self, mode: str, job_log: Path) -> subprocess.Popen[bytes]:
        """Start the worker with the deferred prefill in its environment."""
        count, sleep_s = self._pending
        self._pending = (0, 0.0)
        self._prefill_env = {"BENCH_PREFILL": str(count), "BENCH_PREFILL_SLEEP": repr(sleep_s)}
        try:
            return super().start_worker(mode, job_log)
        finally:
            self._prefill_env = {}

    def worker_env(self, mode: str) -> dict[str, str]:
        """The mode's environment, plus the prefill while a worker is being started."""
        return super().worker_env(mode) | self._prefill_env
