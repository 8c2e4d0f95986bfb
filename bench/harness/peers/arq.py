"""arq on Redis (its own venv: arq pins redis<6).

default: ``arq WorkerSettings`` (max_jobs 10, poll_delay 0.5 s, results kept 1 h, per-job INFO
logs). best: per-job logs off, results kept 1 s, poll_delay 0.05 s, max_jobs 10 (10, 20, 50 and
100 tried: equal within noise).
io: ``max_jobs=100``.
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter

_BEST = {"BENCH_ARQ_POLL_DELAY": "0.05", "BENCH_ARQ_KEEP_RESULT": "1", "BENCH_ARQ_LOG_RESULTS": "0"}


class ArqAdapter(Adapter):
    """arq (asyncio) with default pickle serializer."""

    name = "arq"
    package = "arq"
    db = 4
    client_module = "bench.peer_tasks.arq_tasks"
    venv = ".bench-venv/envs/arq"
    count_caps: ClassVar[dict[str, int]] = {"drain:default": 5000, "drain:best": 10000, "io": 2000}
    tuning_modes: ClassVar[tuple[str, ...]] = ("quiet-j20", "quiet-j50", "quiet-j100")

    def worker_command(self, mode: str) -> list[str]:
        cmd = [self.bin("arq"), f"{self.client_module}.WorkerSettings"]
        if mode == "best" or mode.startswith("quiet-j"):
            cmd += ["--custom-log-dict", f"{self.client_module}.QUIET_LOGGING"]
        elif mode not in ("default", "io"):
            raise ValueError(f"arq: unknown mode {mode!r}")
        return cmd

    def worker_env(self, mode: str) -> dict[str, str]:
        jobs = {"best": "10", "quiet-j20": "20", "quiet-j50": "50", "quiet-j100": "100"}
        if mode in jobs:
            return _BEST | {"BENCH_ARQ_MAX_JOBS": jobs[mode]}
        if mode == "io":
            return {"BENCH_ARQ_MAX_JOBS": "100"}
        return {}
