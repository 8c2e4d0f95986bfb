"""RQ job function and client (worker: ``rq worker -u URL bench``)."""

from __future__ import annotations

from rq import Queue

from bench.peer_tasks.body import run_sync
from redis import Redis

QUEUE = "bench"


def bench_job(n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """The shared job body."""
    run_sync(n, sleep_s, t_enq)


class Client:
    """Producer side: ``Queue.enqueue`` per job, ``Queue.enqueue_many`` (one pipeline) in bulk."""

    is_async = False

    def __init__(self, redis_url: str) -> None:
        self.conn = Redis.from_url(redis_url)
        self.queue = Queue(QUEUE, connection=self.conn)

    def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        self.queue.enqueue(bench_job, n, sleep_s, t_enq)

    def enqueue_many(self, items: list[tuple[int, float, float]]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(bench_job, args=item) for item in items])

    def close(self) -> None:
        self.conn.close()


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)
