"""pgqueuer factory, entrypoint and client (worker: ``pgq run ...pgqueuer_tasks:create``).

pgqueuer passes a job's payload as bytes: ``n sleep_s t_enq`` as JSON. The worker's connection
is asyncpg, as in pgqueuer's README; so is the producer's.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import AsyncpgDriver, Job, PgQueuer, Queries

from bench.peer_tasks.body import run_async

PG_URL = os.environ.get("BENCH_REDIS_URL", "postgresql://bench@127.0.0.1:5432/bench_pgqueuer")
#: ``BENCH_PGQUEUER_LIMIT``: the entrypoint's ``concurrency_limit`` (pgqueuer's default 0: none).
LIMIT = int(os.environ.get("BENCH_PGQUEUER_LIMIT", "0"))


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    """The factory ``pgq run`` enters (pgqueuer 1.6: an async context manager)."""
    connection = await asyncpg.connect(PG_URL)
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("bench_job", concurrency_limit=LIMIT)
    async def bench_job(job: Job) -> None:
        n, sleep_s, t_enq = json.loads(job.payload or b"[]")
        await run_async(n, sleep_s, t_enq)

    try:
        yield pgq
    finally:
        await connection.close()


def _payload(n: int, sleep_s: float, t_enq: float) -> bytes:
    return json.dumps([n, sleep_s, t_enq]).encode()


class Client:
    """Producer side: ``Queries.enqueue`` per job, or with lists for a batch."""

    is_async = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.connection: asyncpg.Connection | None = None
        self.queries: Queries | None = None

    async def connect(self) -> None:
        self.connection = await asyncpg.connect(self.url)
        self.queries = Queries(AsyncpgDriver(self.connection))

    async def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        assert self.queries is not None
        await self.queries.enqueue("bench_job", _payload(n, sleep_s, t_enq))

    async def enqueue_many(self, items: list[tuple[int, float, float]]) -> None:
        assert self.queries is not None
        await self.queries.enqueue(
            ["bench_job"] * len(items), [_payload(*item) for item in items], [0] * len(items)
        )

    async def close(self) -> None:
        if self.connection is not None:
            await self.connection.close()


def make_client(url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(url)
