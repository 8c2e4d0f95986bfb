"""Issue 19 item 3: the async producer API on every backend never blocks the event loop.

Each test runs ``enqueue_async``, ``enqueue_many_async`` and ``wait_async`` on an event loop
that also runs a heartbeat coroutine ticking every 5 ms; the largest gap between two ticks
shows whether anything blocked the loop (a synchronous ``wait`` would block it for the whole
job). Redis uses its native async client (no thread); SQLite and memory a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from conveyor import Conveyor, JobFailed, JobState, PermanentError, WaitTimeout
from tests.worker.conftest import running

TICK = 0.005
MAX_GAP = 0.15  # a blocked loop would stall for the job's 0.6 s


async def _heartbeat(gaps: list[float], stop: asyncio.Event) -> None:
    last = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(TICK)
        now = time.monotonic()
        gaps.append(now - last)
        last = now


async def _measured(work: Any) -> tuple[Any, float]:
    gaps: list[float] = []
    stop = asyncio.Event()
    beat = asyncio.create_task(_heartbeat(gaps, stop))
    try:
        result = await work
    finally:
        stop.set()
        await beat
    return result, max(gaps, default=0.0)


def test_async_producer_api_does_not_block_the_loop(live_app: Conveyor) -> None:
    @live_app.task
    def slow(seconds: float, tag: str) -> str:
        time.sleep(seconds)
        return tag

    async def work() -> tuple[str, list[str]]:
        handle = await slow.enqueue_async(0.6, "one")
        handles = await live_app.enqueue_many_async([slow.s(0.01, "a"), slow.s(0.01, "b")])
        first = await handle.wait_async(timeout=30)
        rest = [await h.wait_async(timeout=30) for h in handles]
        return first, rest

    with running(live_app, concurrency=4):
        (first, rest), gap = asyncio.run(_measured(work()))
    assert (first, rest) == ("one", ["a", "b"])
    assert gap < MAX_GAP, f"the event loop was blocked for {gap:.3f}s"


def test_async_wait_raises_failures_and_timeouts(live_app: Conveyor) -> None:
    @live_app.task(max_attempts=1)
    def broken() -> None:
        raise PermanentError("nope")

    @live_app.task
    def idle() -> None:
        return None

    async def work() -> None:
        handle = await broken.enqueue_async()
        with pytest.raises(JobFailed, match="nope"):
            await handle.wait_async(timeout=30)
        pending = await live_app.enqueue_async("idle", queue="nobody-serves-this")
        with pytest.raises(WaitTimeout):
            await pending.wait_async(timeout=0.3)
        assert pending.state is JobState.PENDING

    with running(live_app):
        _, gap = asyncio.run(_measured(work()))
    assert gap < MAX_GAP


def test_async_enqueue_checks_arguments_and_names(live_app: Conveyor) -> None:
    from conveyor import ValidationError

    @live_app.task
    def add(x: int, y: int) -> int:
        return x + y

    async def work() -> None:
        with pytest.raises(ValidationError, match="missing required argument"):
            await add.enqueue_async(1)  # type: ignore[call-arg]
        with pytest.raises(ValidationError, match="did you mean 'add'"):
            await live_app.enqueue_async("ad", args=[1, 2])

    asyncio.run(work())
    assert all(sum(s.values()) == 0 for s in live_app.broker.counts().values())


def test_redis_uses_its_native_async_client(live_app: Conveyor, backend: str) -> None:
    if backend != "redis":
        pytest.skip("Redis only")

    @live_app.task
    def add(x: int, y: int) -> int:
        return x + y

    async def work() -> int:
        handle = await add.enqueue_async(1, 2)
        assert asyncio.get_running_loop() in live_app.broker.aclients.by_loop  # type: ignore[attr-defined]
        return await handle.wait_async(timeout=30)

    with running(live_app):
        assert asyncio.run(work()) == 3
