"""The PostgreSQL peers: procrastinate and pgqueuer, in ``.bench-venv/envs/pg``.

Both run on the harness's private PostgreSQL cluster (:mod:`bench.harness.pg_server`), each in
its own database (:class:`~bench.harness.pg_system.PgDatabase`), with the shared job body.

procrastinate — default: ``procrastinate worker`` (concurrency 1, LISTEN/NOTIFY on, jobs kept
after completion); best: the concurrency found with ``tune``; io: ``--concurrency 100``; crash:
``--concurrency 8`` plus procrastinate's documented stalled-job recipe (see
:mod:`bench.peer_tasks.procrastinate_tasks`): without it a killed worker's jobs stay ``doing``.

pgqueuer — default: ``pgq run`` (batches of 10, no concurrency cap, LISTEN/NOTIFY); best: the
batch size found with ``tune``; io: ``--max-concurrent-tasks 100`` (batches of 50, the largest the
cap allows); crash: ``--heartbeat-timeout 5 --dequeue-timeout 1`` (defaults 30 s and 30 s: a
killed worker's jobs become stale after 30 s and an idle worker looks for stale jobs only when
its 30 s wait for a NOTIFY times out, beyond the harness's 15 s idle window) and 8 slots (the
entrypoint's ``concurrency_limit=8``, ``--batch-size 4``). Not ``--max-concurrent-tasks 8``:
with that cap pgqueuer 1.6's worker never re-picked the stale jobs in our runs.

Crash modes use 8 slots, as Conveyor's does: with unlimited slots all 200 jobs of 50 ms finish
before the kill at 1 s and the check would test nothing (8 is Dramatiq's default thread count).
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter
from bench.harness.pg_system import PgDatabase

_PROCRASTINATE_APP = "bench.peer_tasks.procrastinate_tasks.app"
_PROCRASTINATE_CONC = {"best": 50, "io": 100, "c10": 10, "c50": 50, "c200": 200}


class ProcrastinateAdapter(PgDatabase, Adapter):
    """procrastinate 3 (psycopg 3, asyncio worker)."""

    name = "procrastinate"
    package = "procrastinate"
    db = 0  # unused: nothing of this system lives in Redis
    database = "bench_procrastinate"
    venv = ".bench-venv/envs/pg"
    client_module = "bench.peer_tasks.procrastinate_tasks"
    bulk_api = "task.batch_defer_async (one INSERT per batch)"
    # ~300-800 jobs/s here: fewer jobs keep a full run within minutes (marked * in the table)
    count_caps: ClassVar[dict[str, int]] = {"drain:default": 5000, "drain:best": 10000, "io": 2000}
    tuning_modes: ClassVar[tuple[str, ...]] = ("c10", "c200")
    crash_mode = "crash"

    def schema_command(self, url: str) -> list[str]:
        return [self.bin("procrastinate"), "--app", _PROCRASTINATE_APP, "schema", "--apply"]

    def worker_command(self, mode: str) -> list[str]:
        base = [self.bin("procrastinate"), "--app", _PROCRASTINATE_APP, "worker"]
        if mode == "default":
            return base
        if mode == "crash":
            return [*base, "--concurrency", "8"]
        if mode in _PROCRASTINATE_CONC:
            return [*base, "--concurrency", str(_PROCRASTINATE_CONC[mode])]
        raise ValueError(f"procrastinate: unknown mode {mode!r}")

    def worker_env(self, mode: str) -> dict[str, str]:
        return {"BENCH_PROCRASTINATE_CRASH": "1"} if mode == "crash" else {}


_PGQ_FACTORY = "bench.peer_tasks.pgqueuer_tasks:create"
#: 5 s heartbeat timeout and a 1 s poll so that stale jobs are looked for (module doc).
_PGQ_CRASH = ("--heartbeat-timeout", "5", "--dequeue-timeout", "1", "--batch-size", "4")
_PGQ_BATCH = {"best": 100, "b50": 50, "b100": 100, "b500": 500}


class PgQueuerAdapter(PgDatabase, Adapter):
    """pgqueuer (asyncpg, asyncio worker)."""

    name = "pgqueuer"
    package = "pgqueuer"
    db = 0
    database = "bench_pgqueuer"
    venv = ".bench-venv/envs/pg"
    client_module = "bench.peer_tasks.pgqueuer_tasks"
    bulk_api = "Queries.enqueue with lists (one INSERT per batch)"
    tuning_modes: ClassVar[tuple[str, ...]] = ("b50", "b500")
    crash_mode = "crash"

    def schema_command(self, url: str) -> list[str]:
        return [self.bin("pgq"), "--pg-dsn", url, "install"]

    def worker_command(self, mode: str) -> list[str]:
        base = [self.bin("pgq"), "run", _PGQ_FACTORY]
        if mode == "default":
            return base
        if mode == "crash":
            return [*base, *_PGQ_CRASH]
        if mode == "io":
            return [*base, "--max-concurrent-tasks", "100", "--batch-size", "50"]
        if mode in _PGQ_BATCH:
            return [*base, "--batch-size", str(_PGQ_BATCH[mode])]
        raise ValueError(f"pgqueuer: unknown mode {mode!r}")

    def worker_env(self, mode: str) -> dict[str, str]:
        return {"BENCH_PGQUEUER_LIMIT": "8"} if mode == "crash" else {}
