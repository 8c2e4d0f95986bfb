"""Celery app and client for the benchmark (worker: ``celery -A bench.peer_tasks.celery_tasks``).

Knobs (environment, set by :mod:`bench.harness.peers.celery` per worker mode):
``BENCH_CELERY_PREFETCH`` -> ``worker_prefetch_multiplier`` (Celery's default is 4).
No result backend is configured and results are ignored, as a fire-and-forget user would.
"""

from __future__ import annotations

import os

from celery import Celery, group

from bench.peer_tasks.body import run_sync

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/1")

app = Celery("bench", broker=REDIS_URL)
app.conf.task_default_queue = "bench"
app.conf.task_ignore_result = True
app.conf.broker_connection_retry_on_startup = True
if os.environ.get("BENCH_CELERY_PREFETCH"):
    app.conf.worker_prefetch_multiplier = int(os.environ["BENCH_CELERY_PREFETCH"])


@app.task(name="bench_job")
def bench_job(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """The shared job body."""
    run_sync(n, sleep_s, t_enq)


class Client:
    """Producer side: ``delay()`` per job; ``group().apply_async()`` as the closest bulk idiom."""

    is_async = False

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        bench_job.delay(n, sleep_s, t_enq)

    def enqueue_many(self, items: list[tuple[int, float, float]]) -> None:
        group(bench_job.s(n, s, t) for n, s, t in items).apply_async()

    def close(self) -> None:
        pass


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)
