"""procrastinate app, task and client (worker: ``procrastinate --app ...procrastinate_tasks.app``).

The task is ``async def`` (procrastinate runs sync tasks in threads; async is its native path).
Crash mode (``BENCH_PROCRASTINATE_CRASH=1``): procrastinate does not re-run the jobs of a dead
worker by itself; its documented recipe is a periodic task that retries stalled jobs
(``job_manager.get_stalled_jobs`` + ``retry_job``). It is registered here to run every second,
with a 1 s worker heartbeat and jobs stalled after 5 s without one, so that a killed worker's
jobs can come back within the harness's 15 s idle window (defaults: heartbeat 10 s, 30 s).
"""

from __future__ import annotations

import os
from typing import Any

from procrastinate import App, PsycopgConnector

from bench.peer_tasks.body import run_async

PG_URL = os.environ.get("BENCH_REDIS_URL", "postgresql://bench@127.0.0.1:5432/bench_procrastinate")
CRASH = os.environ.get("BENCH_PROCRASTINATE_CRASH") == "1"
STALLED_AFTER = 5.0

worker_defaults: dict[str, Any] = {}
if CRASH:
    worker_defaults = {"update_heartbeat_interval": 1.0, "stalled_worker_timeout": STALLED_AFTER}

app = App(connector=PsycopgConnector(conninfo=PG_URL), worker_defaults=worker_defaults)


@app.task(name="bench_job")
async def bench_job(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """The shared job body."""
    await run_async(n, sleep_s, t_enq)


if CRASH:

    @app.periodic(cron="* * * * * *")  # every second (croniter's sixth field is seconds)
    @app.task(name="retry_stalled_jobs", queueing_lock="retry_stalled_jobs", pass_context=True)
    async def retry_stalled_jobs(context: Any, timestamp: int) -> None:
        """procrastinate's documented recipe: retry the jobs of workers without a heartbeat."""
        for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED_AFTER):
            await app.job_manager.retry_job(job)


class Client:
    """Producer side: ``defer_async`` per job, ``batch_defer_async`` for a batch."""

    is_async = True

    def __init__(self, url: str) -> None:
        self.url = url

    async def connect(self) -> None:
        await app.open_async()

    async def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        await bench_job.defer_async(n=n, sleep_s=sleep_s, t_enq=t_enq)

    async def enqueue_many(self, items: list[tuple[int, float, float]]) -> None:
        await bench_job.batch_defer_async(
            *({"n": n, "sleep_s": s, "t_enq": t} for n, s, t in items)
        )

    async def close(self) -> None:
        await app.close_async()


def make_client(url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(url)
