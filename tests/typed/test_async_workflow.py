"""``await workflow.wait_async()`` never blocks the event loop (workflows.md, issue 19 item 3):
the waits AND the final read of the last steps' results run off the loop on every backend.

The real broker answers every call; the test only records which thread made each
``workflow_jobs`` read (a broker round trip: a synchronous one on the loop's thread would
stall every other coroutine for it, which a fast local server hides from a timing check).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from conveyor import Conveyor, chain, group
from tests.worker.conftest import running


def test_workflow_wait_async_reads_off_the_loop(live_app: Conveyor) -> None:
    @live_app.task
    def add(x: int, y: int) -> int:
        return x + y

    broker = live_app.runtime.broker
    callers: list[int] = []
    real = broker.workflow_jobs

    def spied(workflow_id: str) -> Any:
        callers.append(threading.get_ident())
        return real(workflow_id)

    broker.workflow_jobs = spied  # type: ignore[method-assign]

    async def work() -> tuple[Any, Any, int]:
        one = chain(add.s(1, 2), add.s(10)).enqueue()
        many = group(add.s(i, i) for i in range(3)).enqueue()
        return (
            await one.wait_async(timeout=30),
            await many.wait_async(timeout=30),
            threading.get_ident(),
        )

    with running(live_app, concurrency=2):
        first, second, loop_thread = asyncio.run(work())
    assert (first, second) == (13, [0, 2, 4])
    assert callers, "wait_async read no result"
    assert loop_thread not in callers, "wait_async read the results on the event loop"
