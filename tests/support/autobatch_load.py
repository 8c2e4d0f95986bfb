"""Many threads enqueueing one job per call through the auto-batcher (issue 18 load tests).

Shared by tests/redis/test_autobatch_redis.py and tests/sqlite/test_autobatch_sqlite.py: each
thread enqueues its jobs one call at a time and keeps the ids it was told; the broker's real
``enqueue`` is wrapped to record every call's size (instrumentation only).
"""

from __future__ import annotations

import threading
from typing import Any

from conveyor import Conveyor


def record_enqueue_sizes(broker: Any) -> list[int]:
    """Record the size of every ``broker.enqueue`` call (the real method still runs)."""
    sizes: list[int] = []
    real = broker.enqueue

    def counting(jobs: Any, now: float, payloads: Any = None, *, fresh_ids: bool = False) -> Any:
        sizes.append(len(jobs))
        return real(jobs, now, payloads, fresh_ids=fresh_ids)

    setattr(broker, "enqueue", counting)  # noqa: B010 - an instance attribute over the method
    return sizes


def hammer(app: Conveyor, threads: int, per_thread: int, timeout: float = 120.0) -> list[list[str]]:
    """``threads`` threads each enqueue ``per_thread`` jobs ``t(thread, i)`` one call at a
    time; returns the ids each thread was told, in its order. Fails on any caller error."""
    ids: list[list[str]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run(k: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                ids[k].append(app.enqueue("load.t", args=[k, i]).id)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout)
    assert not any(t.is_alive() for t in pool), "callers still blocked"
    assert not errors, errors[:3]
    return ids
