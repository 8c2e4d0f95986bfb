"""``await handle.wait_async()`` on Redis's native async client (aio.py) honours its timeout
and survives being cancelled, as the synchronous ``wait`` does: a short ``socket_timeout`` in
the URL never turns a wait into ``BrokerUnavailable``, and a cancelled waiter leaves the
client's connections usable (no stale reply read by the next command)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from conveyor import Conveyor, WaitTimeout
from conveyor.broker.redis import RedisBroker


def _app(url: str) -> Conveyor:
    broker = RedisBroker.from_url(url)
    broker.flush_all()
    return Conveyor(broker)


def test_wait_async_with_a_short_socket_timeout_times_out_cleanly(redis_server: Any) -> None:
    app = _app(redis_server.url + "?socket_timeout=0.5")
    try:
        handle = app.enqueue("never.runs", [1])  # no worker: the wait must run out
        with pytest.raises(WaitTimeout):
            handle.wait(timeout=1.5)  # the synchronous path: blocks stay under the timeout

        async def main() -> float:
            start = time.monotonic()
            with pytest.raises(WaitTimeout):
                await handle.wait_async(timeout=1.5)
            return time.monotonic() - start

        took = asyncio.run(main())
        assert 1.4 <= took < 5.0
    finally:
        app.close()


def test_a_cancelled_wait_async_leaves_the_client_usable(redis_server: Any) -> None:
    app = _app(redis_server.url)
    try:
        waiting = app.enqueue("never.runs", [1])

        async def main() -> list[Any]:
            seen = []
            for i in range(5):
                with pytest.raises(TimeoutError):  # cancels the XREAD BLOCK in flight
                    await asyncio.wait_for(waiting.wait_async(timeout=30), 0.2 + 0.05 * i)
                handle = await app.enqueue_async("other", [i])
                job = await app.broker.get_async(handle.id)
                assert job is not None
                seen.append((job.id == handle.id, job.args))
            return seen

        assert asyncio.run(main()) == [(True, [i]) for i in range(5)]
    finally:
        app.close()
