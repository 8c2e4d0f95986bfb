"""arq job coroutine, worker settings and client (worker: ``arq ...arq_tasks.WorkerSettings``).

Runs on its own interpreter (.bench-venv/envs/arq). Knobs from the environment, each applied
only when set so that the default mode is arq's true defaults: ``BENCH_ARQ_MAX_JOBS``
(default 10), ``BENCH_ARQ_POLL_DELAY`` (default 0.5 s), ``BENCH_ARQ_KEEP_RESULT`` (default
3600 s), ``BENCH_ARQ_LOG_RESULTS`` (default on).
"""

from __future__ import annotations

import os
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from bench.peer_tasks.body import run_async

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/4")


async def bench_job(ctx: dict[str, Any], n: int, sleep_s: float = 0.0, t_enq: float = 0.0) -> None:
    """The shared job body."""
    await run_async(n, sleep_s, t_enq)


class WorkerSettings:
    """Settings class read by the ``arq`` CLI."""

    functions = [bench_job]
    redis_settings = RedisSettings.from_dsn(REDIS_URL)


_KNOBS = {
    "BENCH_ARQ_MAX_JOBS": ("max_jobs", int),
    "BENCH_ARQ_POLL_DELAY": ("poll_delay", float),
    "BENCH_ARQ_KEEP_RESULT": ("keep_result", float),
    "BENCH_ARQ_LOG_RESULTS": ("log_results", lambda v: v == "1"),
}
for _env, (_attr, _conv) in _KNOBS.items():
    if os.environ.get(_env):
        setattr(WorkerSettings, _attr, _conv(os.environ[_env]))


class Client:
    """Producer side: ``ArqRedis.enqueue_job`` per job (arq has no bulk enqueue)."""

    is_async = True

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.pool: Any = None

    async def connect(self) -> None:
        self.pool = await create_pool(RedisSettings.from_dsn(self.redis_url))

    async def enqueue(self, n: int, sleep_s: float, t_enq: float) -> None:
        await self.pool.enqueue_job("bench_job", n, sleep_s, t_enq)

    async def close(self) -> None:
        await self.pool.aclose()


def make_client(redis_url: str) -> Client:
    """Entry point used by :mod:`bench.harness.producer`."""
    return Client(redis_url)


#: ``arq --custom-log-dict`` value that silences arq's per-job INFO lines (used in best mode).
QUIET_LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler", "level": "WARNING"}},
    "loggers": {"arq": {"handlers": ["stderr"], "level": "WARNING"}},
}
