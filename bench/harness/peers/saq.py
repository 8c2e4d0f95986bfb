"""SAQ on Redis.

default: ``saq settings`` (concurrency 10). best: concurrency 20 (1, 2, 5, 10, 20, 50 tried).
io: concurrency 100.
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter

_CONCURRENCY = {
    "best": "20",
    "io": "100",
    "c1": "1",
    "c2": "2",
    "c5": "5",
    "c20": "20",
    "c50": "50",
}


class SaqAdapter(Adapter):
    """SAQ (asyncio) with its Redis queue."""

    name = "saq"
    package = "saq"
    db = 5
    client_module = "bench.peer_tasks.saq_tasks"
    count_caps: ClassVar[dict[str, int]] = {"drain:default": 10000, "drain:best": 10000, "io": 2000}
    tuning_modes: ClassVar[tuple[str, ...]] = ("c1", "c2", "c5", "c50")

    def worker_command(self, mode: str) -> list[str]:
        if mode != "default" and mode not in _CONCURRENCY:
            raise ValueError(f"saq: unknown mode {mode!r}")
        return [self.bin("saq"), f"{self.client_module}.settings"]

    def worker_env(self, mode: str) -> dict[str, str]:
        c = _CONCURRENCY.get(mode)
        return {"BENCH_SAQ_CONCURRENCY": c} if c else {}
