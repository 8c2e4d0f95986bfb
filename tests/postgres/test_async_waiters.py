"""Many ``await handle.wait_async()`` on PostgreSQL hold no thread while they wait (issue 17).

``watch_async`` used to run the synchronous ``watch`` on the event loop's default executor in
one-second slices: every waiter held one of its few threads (``min(32, cpus + 4)``) for the
whole slice, so 200 waiters queued up in it and any other ``asyncio.to_thread`` call of the
application (``get_async``, ``enqueue_async`` on PostgreSQL) waited behind them — tens of
seconds. The waiters now sleep on asyncio futures that the process's one "done" listener
(``waits.DoneListener``) resolves; a thread is borrowed only for each read of the job.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.broker.records import Ack
from conveyor.core.job import Job
from conveyor.core.state import JobState

pytestmark = pytest.mark.timeout(120)
WAITERS = 200


def _executor_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("asyncio_"))


async def _scenario(pg: PostgresBroker) -> dict[str, float]:
    now = time.time()
    pg.enqueue([Job(id=f"w{i}", task="t") for i in range(WAITERS)], now)
    waiters = [
        asyncio.create_task(pg.watch_async(f"w{i}", "default", 60.0)) for i in range(WAITERS)
    ]
    await asyncio.sleep(1.5)  # every waiter is waiting (past its first slice)
    out: dict[str, float] = {"threads": _executor_threads()}
    began = time.monotonic()
    await asyncio.wait_for(pg.get_async("w0"), 30.0)  # a thread of the default executor
    out["get_s"] = time.monotonic() - began
    leases = await asyncio.to_thread(
        pg.claim, ["default"], time.time(), limit=WAITERS, worker_id="w"
    )
    assert len(leases) == WAITERS
    done = time.monotonic()
    acks = [Ack(lease.job.id, lease.token, queue="default") for lease in leases]
    assert all(await asyncio.to_thread(pg.complete, acks, time.time()))
    jobs = await asyncio.wait_for(asyncio.gather(*waiters), 60.0)
    out["all_s"] = time.monotonic() - done
    assert all(j is not None and j.state is JobState.COMPLETED for j in jobs)
    return out


def test_two_hundred_async_waiters_leave_the_default_executor_free(pg: PostgresBroker) -> None:
    out = asyncio.run(_scenario(pg))
    assert out["get_s"] < 2.0, f"get_async queued behind the waiters' threads: {out}"
    assert out["all_s"] < 10.0, f"the waiters were slow to return: {out}"


async def _cancelled(pg: PostgresBroker) -> int:
    pg.enqueue([Job(id="c", task="t")], time.time())
    waiter = asyncio.create_task(pg.watch_async("c", "default", 60.0))
    await asyncio.sleep(1.0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    listener = pg._done
    assert listener is not None
    with listener._cond:
        return len(listener._futures)


def test_a_cancelled_async_waiter_leaves_nothing_registered(pg: PostgresBroker) -> None:
    assert asyncio.run(_cancelled(pg)) == 0


async def _times_out(pg: PostgresBroker) -> float:
    pg.enqueue([Job(id="slow", task="t")], time.time())
    began = time.monotonic()
    job = await pg.watch_async("slow", "default", 1.5)
    assert job is not None and job.state is JobState.PENDING
    return time.monotonic() - began


def test_an_async_wait_returns_the_unfinished_job_at_its_timeout(pg: PostgresBroker) -> None:
    assert 1.4 <= asyncio.run(_times_out(pg)) < 5.0
