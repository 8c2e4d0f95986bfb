"""Conveyor on Redis, run from the project's own virtualenv.

default: ``conveyor worker`` with its defaults (supervisor + 1 process, concurrency 32, log level
info: failures only, successes are logged at DEBUG).
best: quiet logging (one log line per job is the largest per-job cost after Redis itself), the
worker in the CLI process (``--no-supervisor``, no supervisor process) and concurrency tuned with
the ``tune`` scenario. io: the asyncio executor, concurrency 100, same flags. crash: defaults
(a killed worker's jobs come back when their 10 s lease expires; the reaper runs every 2 s,
inside the harness's 15 s idle window) except ``--concurrency 8``: with the default 32 slots
all 200 jobs of 50 ms finish within 0.4 s, before the kill at 1 s, and the check would test
nothing. 8 slots is Dramatiq's default thread count.
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter

_CONCURRENCY = {
    "best": 2048,
    "c16": 16,
    "c64": 64,
    "c256": 256,
    "c512": 512,
    "c1024": 1024,
    "c2048": 2048,
    "c4096": 4096,
}

#: ``tune`` candidates that keep every default but the slot count (supervisor, log level info).
_DEFAULT_BUT_CONCURRENCY = {"d32": 32, "d64": 64, "d128": 128, "d256": 256, "d512": 512}


class ConveyorAdapter(Adapter):
    """Conveyor's CLI worker: batched Lua claims sized to free slots, coalesced acks."""

    name = "conveyor"
    package = "conveyor-jobs"
    db = 0
    venv = ".venv"
    client_module = "bench.peer_tasks.conveyor_tasks"
    bulk_api = "app.enqueue_many (one atomic Lua call per batch)"
    tuning_modes: ClassVar[tuple[str, ...]] = (
        *("d64", "d128", "d256", "d512"),
        *("c256", "c1024", "c4096"),
    )
    crash_mode = "crash"

    def worker_command(self, mode: str) -> list[str]:
        base = [self.bin("conveyor"), "worker", f"{self.client_module}:app"]
        if mode == "default":
            return base
        if mode == "crash":
            return [*base, "--concurrency", "8"]
        if mode in _DEFAULT_BUT_CONCURRENCY:  # the defaults with another slot count
            return [*base, "--concurrency", str(_DEFAULT_BUT_CONCURRENCY[mode])]
        quiet = ["--log-level", "warning", "--no-supervisor"]
        if mode == "io":
            return [*base, "--concurrency", "100", *quiet]
        if mode in _CONCURRENCY:
            return [*base, "--concurrency", str(_CONCURRENCY[mode]), *quiet]
        raise ValueError(f"conveyor: unknown mode {mode!r}")

    def worker_env(self, mode: str) -> dict[str, str]:
        return {"BENCH_CONVEYOR_ASYNC": "1"} if mode == "io" else {}
