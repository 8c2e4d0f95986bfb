"""Dramatiq broker, actor and client (worker: ``dramatiq bench.peer_tasks.dramatiq_tasks``).

Prefetch can be tuned with Dramatiq's own ``dramatiq_queue_prefetch`` environment variable.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peer_tasks.body import run_sync

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/3")

broker = RedisBroker(url=REDIS_URL)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench", actor_name="bench_job")
def bench_job(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """The shared job body."""
    run_sync(n, sleep_s, t_enq)


class Client:
    """Producer side: ``actor.send`` per job; ``group(...).run()`` as the closest bulk idiom."""

    is_async = False

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        bench_job.send(n, sleep_s, t_enq)

    def enqueue_many(self, items: list[tuple[int, float, float]]) -> None:
        dramatiq.group(bench_job.message(n, s, t) for n, s, t in items).run()

    def close(self) -> None:
        broker.close()


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)
