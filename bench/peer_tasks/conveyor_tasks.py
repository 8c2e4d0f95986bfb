"""Conveyor app, task and client for the benchmark (worker: ``conveyor worker ...:app``).

``BENCH_CONVEYOR_ASYNC=1`` registers the job as ``async def`` (the asyncio executor) under the
same name, so the producer is identical in every mode.
"""

from __future__ import annotations

import os

from bench.peer_tasks.body import run_async, run_sync
from conveyor import Conveyor
from conveyor.task import JobSpec

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

app = Conveyor(REDIS_URL)

if os.environ.get("BENCH_CONVEYOR_ASYNC") == "1":

    @app.task(name="bench_job")
    async def bench_job_async(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
        """The shared job body, on the asyncio executor."""
        await run_async(n, sleep_s, t_enq)

else:

    @app.task(name="bench_job")
    def bench_job(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
        """The shared job body, on the thread executor."""
        run_sync(n, sleep_s, t_enq)


class Client:
    """Producer side: enqueue by task name, one call per job or atomic batches."""

    is_async = False

    def __init__(self, redis_url: str) -> None:
        self.app = Conveyor(redis_url)

    def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        self.app.enqueue("bench_job", args=[n, sleep_s, t_enq])

    def enqueue_many(self, items: list[tuple[int, float, float]]) -> None:
        self.app.enqueue_many([JobSpec("bench_job", item) for item in items])

    def close(self) -> None:
        self.app.close()


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)
