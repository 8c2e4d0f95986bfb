"""SAQ job coroutine, worker settings and client (worker: ``saq ...saq_tasks.settings``).

Knob: ``BENCH_SAQ_CONCURRENCY`` (SAQ's default is 10), applied only when set.
"""

from __future__ import annotations

import os
from typing import Any

from saq import Queue

from bench.peer_tasks.body import run_async

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")

queue = Queue.from_url(REDIS_URL, name="bench")


async def bench_job(
    ctx: dict[str, Any], *, n: int, sleep_s: float = 0.0, t_enq: float = 0.0
) -> None:
    """The shared job body (SAQ passes job arguments as keywords)."""
    await run_async(n, sleep_s, t_enq)


settings: dict[str, Any] = {"queue": queue, "functions": [bench_job]}
if os.environ.get("BENCH_SAQ_CONCURRENCY"):
    settings["concurrency"] = int(os.environ["BENCH_SAQ_CONCURRENCY"])


class Client:
    """Producer side: ``Queue.enqueue`` per job (SAQ has no bulk enqueue)."""

    is_async = True

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    async def connect(self) -> None:
        await queue.connect()

    async def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        await queue.enqueue("bench_job", n=n, sleep_s=sleep_s, t_enq=t_enq)

    async def close(self) -> None:
        await queue.disconnect()


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)
