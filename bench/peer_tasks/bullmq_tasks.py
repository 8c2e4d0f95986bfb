"""BullMQ for Python (PyPI ``bullmq``, the port of the Node library): job, worker and client.

Worker: ``python -m bench.peer_tasks.bullmq_tasks`` (one asyncio ``Worker`` on the queue
"bench"; SIGTERM closes it). Knob: ``BENCH_BULLMQ_CONCURRENCY`` (the Worker's concurrency,
BullMQ's default 1). Runs on ``.bench-venv/envs/bullmq`` (bench/peers-requirements-bullmq.txt).
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from bullmq import Queue, Worker

from bench.peer_tasks.body import run_async

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
QUEUE = "bench"


async def bench_job(job: Any, token: str) -> None:
    """The shared job body; the job's data is ``{"n", "s", "t"}``."""
    data = job.data
    await run_async(int(data["n"]), float(data["s"]), float(data["t"]))


async def run_worker() -> None:
    """Run one Worker until SIGTERM or SIGINT, then close it gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    concurrency = int(os.environ.get("BENCH_BULLMQ_CONCURRENCY", "1"))
    worker = Worker(QUEUE, bench_job, {"connection": REDIS_URL, "concurrency": concurrency})
    await stop.wait()
    await worker.close()


class Client:
    """Producer side: ``Queue.add`` per job, ``Queue.addBulk`` per batch."""

    is_async = True

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.queue: Queue | None = None

    async def connect(self) -> None:
        self.queue = Queue(QUEUE, {"connection": self.redis_url})

    async def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        assert self.queue is not None
        await self.queue.add("bench", {"n": n, "s": sleep_s, "t": t_enq})

    async def enqueue_many(self, items: list[tuple[int, float, float]]) -> None:
        assert self.queue is not None
        jobs = [{"name": "bench", "data": {"n": n, "s": s, "t": t}} for n, s, t in items]
        await self.queue.addBulk(jobs)

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)


if __name__ == "__main__":
    asyncio.run(run_worker())
