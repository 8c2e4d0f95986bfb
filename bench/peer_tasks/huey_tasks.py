"""Huey instance, task and client (worker: ``huey_consumer bench.peer_tasks.huey_tasks.huey``)."""

from __future__ import annotations

import os

from huey import RedisHuey

from bench.peer_tasks.body import run_sync

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6")

huey = RedisHuey("bench", url=REDIS_URL)


@huey.task(name="bench_job")
def bench_job(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """The shared job body."""
    run_sync(n, sleep_s, t_enq)


class Client:
    """Producer side: calling the task enqueues it (Huey has no bulk enqueue)."""

    is_async = False

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        bench_job(n, sleep_s, t_enq)

    def close(self) -> None:
        pass


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)
