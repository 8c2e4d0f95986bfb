"""Async tasks and async producers.

    python examples/async_tasks.py

``async def`` tasks run on the worker's event loop (many at once, for I/O-bound work); ordinary
tasks on its threads. An async program enqueues without blocking its event loop by running the
broker call off the loop (``asyncio.to_thread``; the FastAPI helper ``conveyor.contrib.starlette.
enqueue`` does the same, or uses ``task.enqueue_async`` where Conveyor has it). The jobs live in
``async.db`` next to this file unless ``CONVEYOR_URL`` is set.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from conveyor import Conveyor, JobState

DB = Path(__file__).resolve().with_name("async.db")
app = Conveyor(os.environ.get("CONVEYOR_URL") or f"sqlite:///{DB}")


@app.task(timeout=10)
async def fetch(n: int) -> int:
    """Stands for an HTTP call: awaits, so hundreds can wait at once on one loop."""
    await asyncio.sleep(0.05)
    return n * n


async def produce(count: int) -> list[str]:
    """Enqueue ``count`` jobs concurrently from async code; returns their ids."""
    handles = await asyncio.gather(*(asyncio.to_thread(fetch.enqueue, n) for n in range(count)))
    return [h.id for h in handles]


async def wait_all(ids: list[str], timeout: float = 60.0) -> list[int]:
    """Poll until every job completed (without blocking the loop); their results in order."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = [await asyncio.to_thread(app.get_job, job_id) for job_id in ids]
        if all(job.state is JobState.COMPLETED for job in jobs):
            return [job.result for job in jobs]
        if time.monotonic() > deadline:
            raise TimeoutError([str(job.state) for job in jobs])
        await asyncio.sleep(0.05)


async def enqueue_and_wait(count: int) -> list[int]:
    """What an async web handler or script does: enqueue, then await the results."""
    return await wait_all(await produce(count))


def main(count: int = 20) -> list[int]:
    """Run a worker on a thread, enqueue ``count`` jobs from asyncio, wait for the results."""
    worker = app.worker(concurrency=count, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        results = asyncio.run(enqueue_and_wait(count))
    finally:
        worker.stop(timeout=10)
        thread.join(15)
    print(f"{count} async jobs: results {results}")
    return results


if __name__ == "__main__":
    main()
