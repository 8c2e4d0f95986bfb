"""Dramatiq 2 on Redis.

default: ``dramatiq --processes 1`` (CLI default is one process per core; threads default 8).
The CLI runs a supervisor plus the worker process, both counted in RSS.
best: one process, 16 threads (tuned: 2/4/8/16/32 threads, prefetch 64 tried; 16 and 32 were
equal within noise, 2-4 clearly slower). io: ``--threads 100``.
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter

_THREADS = {
    "default": 8,
    "best": 16,
    "io": 100,
    "t2": 2,
    "t4": 4,
    "t16": 16,
    "t32": 32,
    "t8-pf64": 8,
}


class DramatiqAdapter(Adapter):
    """Dramatiq with the Redis broker and its default middleware."""

    name = "dramatiq"
    package = "dramatiq"
    db = 3
    client_module = "bench.peer_tasks.dramatiq_tasks"
    bulk_api = "group().run() (no bulk API; enqueues one message per job)"
    tuning_modes: ClassVar[tuple[str, ...]] = ("t2", "t4", "t8-pf64", "t16", "t32")

    def worker_command(self, mode: str) -> list[str]:
        if mode not in _THREADS:
            raise ValueError(f"dramatiq: unknown mode {mode!r}")
        return [
            self.bin("dramatiq"),
            self.client_module,
            "--processes",
            "1",
            "--threads",
            str(_THREADS[mode]),
            "--path",
            str(self.ctx.repo),
        ]

    def worker_env(self, mode: str) -> dict[str, str]:
        return {"dramatiq_queue_prefetch": "64"} if mode == "t8-pf64" else {}
