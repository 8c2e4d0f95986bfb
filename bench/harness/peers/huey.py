"""Huey on Redis.

default: ``huey_consumer`` (one worker thread, INFO logging per task). best: one thread, quiet
logging, health checks and periodic tasks off (1, 2, 4, 8 threads tried: equal within noise;
quiet logging is what helps). io: ``-k thread -w 100``.
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter

_WORKERS = {"best": 1, "w2": 2, "w4": 4, "w8": 8}


class HueyAdapter(Adapter):
    """Huey with RedisHuey (blocking BRPOP dequeue)."""

    name = "huey"
    package = "huey"
    db = 6
    client_module = "bench.peer_tasks.huey_tasks"
    count_caps: ClassVar[dict[str, int]] = {"drain:default": 10000}
    tuning_modes: ClassVar[tuple[str, ...]] = ("w2", "w4", "w8")

    def worker_command(self, mode: str) -> list[str]:
        base = [self.bin("huey_consumer"), f"{self.client_module}.huey"]
        if mode == "default":
            return base
        if mode == "io":
            return [*base, "-k", "thread", "-w", "100"]
        if mode in _WORKERS:
            return [*base, "-k", "thread", "-w", str(_WORKERS[mode]), "-q", "-C", "-n"]
        raise ValueError(f"huey: unknown mode {mode!r}")
