"""Contract: the auto-batching producer (issue 18) on every backend.

Callers run in real threads (or tasks of one event loop) against the real broker. The batch
boundaries are made deterministic by injecting the batcher's timer: with a timer that never
advances, a batch is written exactly when ``max_jobs`` callers are waiting, so "these callers
share one broker call" is a fact of the test, not a timing accident. Broker calls are counted
by wrapping the real broker's ``enqueue`` (instrumentation only: every call still reaches it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import AutoBatch, Conveyor, DuplicateJob, PayloadTooLarge, ValidationError
from conveyor.autobatch import AutoBatcher
from conveyor.broker.base import Broker

DEADLINE = 30.0


def count_enqueues(broker: Broker) -> list[int]:
    """Record the size of every ``broker.enqueue`` call (the real method still runs)."""
    sizes: list[int] = []
    real = broker.enqueue

    def counting(jobs: Any, now: float, payloads: Any = None, *, fresh_ids: bool = False) -> Any:
        sizes.append(len(jobs))
        return real(jobs, now, payloads, fresh_ids=fresh_ids)

    setattr(broker, "enqueue", counting)  # noqa: B010 - an instance attribute over the method
    return sizes


def batch_of(app: Conveyor, n: int) -> AutoBatcher:
    """Turn on auto-batching that writes exactly when ``n`` callers wait (frozen timer)."""
    batcher = AutoBatcher(app.runtime, AutoBatch(max_jobs=n, max_delay=1.0), timer=lambda: 0.0)
    app.runtime.producer.autobatch = batcher
    return batcher


def wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class Caller(threading.Thread):
    """One enqueue on its own thread; keeps the result or the exception."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call, self.result, self.error = call, None, None  # type: Any, Any, Any

    def run(self) -> None:
        try:
            self.result = self.call()
        except Exception as exc:
            self.error = exc


def callers_in_order(batcher: AutoBatcher, calls: list[Callable[[], Any]]) -> list[Caller]:
    """Start one thread per call, each after the previous one's job is buffered (arrival
    order = list order), and wait for all of them."""
    threads = []
    for i, call in enumerate(calls):
        t = Caller(call)
        t.start()
        threads.append(t)
        if i < len(calls) - 1:
            wait_for(lambda i=i, t=t: batcher.waiting == i + 1 or not t.is_alive(), "the buffer")
    for t in threads:
        t.join(DEADLINE)
        assert not t.is_alive(), "a caller is still blocked"
    return threads


def total(app: Conveyor) -> int:
    return sum(sum(states.values()) for states in app.broker.counts().values())


def test_callers_of_one_batch_each_get_their_own_job(app: Conveyor) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    sizes = count_enqueues(app.broker)
    batcher = batch_of(app, 5)
    threads = callers_in_order(batcher, [lambda n=n: t.enqueue(n) for n in range(5)])
    assert sizes == [5], "one broker call for the five callers"
    handles = [th.result for th in threads]
    assert len({h.id for h in handles}) == 5
    for n, h in enumerate(handles):
        assert h.args == [n] and not h.duplicate
        assert app.get_job(h.id).args == [n]
    assert total(app) == 5 and batcher.writes == 1 and batcher.jobs == 5


def test_bad_input_is_raised_in_its_caller_only(app: Conveyor) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    sizes = count_enqueues(app.broker)
    batch_of(app, 3)
    calls: list[Callable[[], Any]] = [
        lambda: t.enqueue(1),
        lambda: app.enqueue("t", args=[1, 2]),  # too many arguments
        lambda: t.enqueue(2),
        lambda: t.enqueue("x" * (1024 * 1024 + 1)),  # type: ignore[arg-type]
        lambda: app.enqueue("t", args=[3], queue="bad queue!"),
        lambda: t.enqueue(3),
    ]
    threads = [Caller(c) for c in calls]
    for th in threads:
        th.start()
    for th in threads:
        th.join(DEADLINE)
    good = [threads[i] for i in (0, 2, 5)]
    assert all(th.error is None and th.result is not None for th in good)
    assert isinstance(threads[1].error, ValidationError)
    assert isinstance(threads[3].error, PayloadTooLarge)
    assert isinstance(threads[4].error, ValidationError) and threads[4].error.field == "queue"
    assert sizes == [3] and total(app) == 3


def test_a_taken_job_id_fails_only_its_caller(app: Conveyor) -> None:
    app.enqueue("t", job_id="taken")
    sizes = count_enqueues(app.broker)
    batcher = batch_of(app, 4)
    threads = callers_in_order(
        batcher,
        [
            lambda: app.enqueue("t", args=[1]),
            lambda: app.enqueue("t", args=[2], job_id="taken"),
            lambda: app.enqueue("t", args=[3], job_id="mine"),
            lambda: app.enqueue("t", args=[4]),
        ],
    )
    assert isinstance(threads[1].error, DuplicateJob)
    for i in (0, 2, 3):
        assert threads[i].error is None and threads[i].result.args == [i + 1]
    assert threads[2].result.id == "mine"
    # the combined call refused the batch (atomic: nothing stored); then one call per job
    assert sizes == [4, 1, 1, 1, 1]
    assert total(app) == 4 and app.get_job("taken").args == []


def test_same_idempotency_key_in_one_batch_is_two_sequential_calls(app: Conveyor) -> None:
    sizes = count_enqueues(app.broker)
    batcher = batch_of(app, 3)
    threads = callers_in_order(
        batcher,
        [
            lambda: app.enqueue("t", args=[1], idempotency_key="order-7"),
            lambda: app.enqueue("t", args=[2], idempotency_key="order-7"),
            lambda: app.enqueue("t", args=[3]),
        ],
    )
    first, second, other = (th.result for th in threads)
    assert sizes == [3]
    assert not first.duplicate and second.duplicate and second.id == first.id
    assert second.args == [1], "the duplicate caller sees the stored (first) job"
    assert not other.duplicate and total(app) == 2


def test_same_job_id_twice_in_one_batch_stores_the_first(app: Conveyor) -> None:
    batcher = batch_of(app, 2)
    threads = callers_in_order(
        batcher,
        [
            lambda: app.enqueue("t", args=[1], job_id="twice"),
            lambda: app.enqueue("t", args=[2], job_id="twice"),
        ],
    )
    assert threads[0].error is None and threads[0].result.id == "twice"
    assert isinstance(threads[1].error, DuplicateJob)
    assert app.get_job("twice").args == [1] and total(app) == 1


def test_one_threads_jobs_keep_their_order(app: Conveyor) -> None:
    app.runtime.producer.autobatch = AutoBatcher(app.runtime, AutoBatch(max_jobs=8))
    ids = [app.enqueue("t", args=[n]).id for n in range(20)]
    assert [j.args for j in app.peek("default", 20)] == [[n] for n in range(20)]
    assert [j.id for j in app.peek("default", 20)] == ids


def test_async_callers_of_one_loop_share_a_batch(app: Conveyor) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    sizes = count_enqueues(app.broker)
    batch_of(app, 4)

    async def main() -> list[Any]:
        calls = [t.enqueue_async(n) for n in range(4)]
        calls.append(t.enqueue_async("x" * (1024 * 1024 + 1)))  # type: ignore[arg-type]
        calls.append(app.enqueue_async("t", args=[9, 9]))
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    assert sizes == [4]
    assert [h.args for h in results[:4]] == [[0], [1], [2], [3]]
    assert len({h.id for h in results[:4]}) == 4
    assert isinstance(results[4], PayloadTooLarge) and isinstance(results[5], ValidationError)
    assert total(app) == 4


def test_async_duplicate_gets_the_existing_job(app: Conveyor) -> None:
    batch_of(app, 2)

    async def main() -> list[Any]:
        first = asyncio.ensure_future(app.enqueue_async("t", args=[1], idempotency_key="k"))
        await asyncio.sleep(0.05)  # the first is buffered before the second arrives
        second = asyncio.ensure_future(app.enqueue_async("t", args=[2], idempotency_key="k"))
        return list(await asyncio.gather(first, second))

    a, b = asyncio.run(main())
    assert b.duplicate and b.id == a.id and b.args == [1]


def test_enqueue_many_bypasses_the_batcher(app: Conveyor) -> None:
    from conveyor import JobSpec

    sizes = count_enqueues(app.broker)
    batcher = batch_of(app, 50)  # would hold any single-job call until 50 wait
    handles = app.enqueue_many([JobSpec("t", (n,), {}, {}) for n in range(3)])
    assert len(handles) == 3 and sizes == [3] and batcher.writes == 0


def test_an_open_app_batch_bypasses_the_batcher(app: Conveyor, backend: str) -> None:
    if getattr(app.broker, "cluster", False):
        pytest.skip("no workflows (app.batch) on Redis Cluster")
    batcher = batch_of(app, 50)
    with app.batch() as b:
        app.enqueue("t", args=[1])
        app.enqueue("t", args=[2])
    assert b.status()["total"] == 2 and total(app) == 2
    assert batcher.writes == 0 and batcher.waiting == 0


def test_close_writes_what_is_buffered_and_a_later_call_starts_again(app: Conveyor) -> None:
    batcher = batch_of(app, 10)
    for n in (1, 2):
        th = Caller(lambda n=n: app.enqueue("t", args=[n]))
        th.start()
        wait_for(lambda: batcher.waiting == 1, "the buffered job")
        batcher.close()  # what app.close() and the interpreter's exit do first
        th.join(DEADLINE)
        assert th.error is None and app.get_job(th.result.id).args == [n]
    assert total(app) == 2 and batcher.writes == 2


def test_debounce_in_one_batch_keeps_the_newest_arguments(app: Conveyor, backend: str) -> None:
    batcher = batch_of(app, 2)
    threads = callers_in_order(
        batcher,
        [
            lambda: app.enqueue("t", args=["v1"], debounce=5.0, unique_key="doc"),
            lambda: app.enqueue("t", args=["v2"], debounce=5.0, unique_key="doc"),
        ],
    )
    first, second = (th.result for th in threads)
    assert second.duplicate and second.id == first.id
    assert app.get_job(first.id).args == ["v2"] and total(app) == 1


def test_a_task_cancelled_while_buffered_drops_its_job(app: Conveyor) -> None:
    sizes = count_enqueues(app.broker)
    batcher = batch_of(app, 2)

    async def main() -> Any:
        doomed = asyncio.ensure_future(app.enqueue_async("t", args=["doomed"]))
        while batcher.waiting < 1:
            await asyncio.sleep(0.001)
        doomed.cancel()
        for _ in range(3):  # the cancel reaches the buffered future on the next loop turns
            await asyncio.sleep(0)
        kept = await app.enqueue_async("t", args=["kept"])  # fills the batch of two
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return kept

    kept = asyncio.run(main())
    assert sizes == [1], "the cancelled job was dropped, not written"
    assert [j.args for j in app.peek("default", 10)] == [["kept"]] and kept.args == ["kept"]


def test_an_idle_writer_thread_exits_and_a_later_call_starts_one(
    app: Conveyor, monkeypatch: pytest.MonkeyPatch
) -> None:
    import conveyor.autobatch as autobatch_module

    monkeypatch.setattr(autobatch_module, "IDLE_EXIT_S", 0.05)
    batcher = batch_of(app, 1)  # every call is a batch of its own: written at once
    for n in (1, 2):
        app.enqueue("t", args=[n])
        writer = batcher._writer
        wait_for(lambda: batcher._writer is None, "the idle writer to exit")
        assert writer is not None
        writer.join(DEADLINE)
        assert not writer.is_alive()  # apps dropped without close() keep no thread
    assert total(app) == 2 and batcher.writes == 2


def test_a_writer_thread_that_cannot_start_neither_loses_the_job_nor_hangs_later_calls(
    app: Conveyor,
) -> None:
    # No new thread can start under a pids/threads limit, or from an atexit handler on
    # Python >= 3.12 ("can't create new thread at interpreter shutdown"). A stack size no
    # system can map makes the real ``Thread.start`` fail the same way.
    batcher = batch_of(app, 1)
    threading.stack_size(1 << 45)
    try:
        with pytest.raises(RuntimeError):
            threading.Thread(target=lambda: None).start()
        handle = app.enqueue("t", args=["no thread"])  # written on the caller's own thread
    finally:
        threading.stack_size(0)
    assert app.get_job(handle.id).args == ["no thread"]
    later = Caller(lambda: app.enqueue("t", args=["later"]))
    later.start()
    later.join(10)
    assert not later.is_alive(), "a later call hangs on a writer that never started"
    assert later.error is None and app.get_job(later.result.id).args == ["later"]
    batcher.close()
    assert total(app) == 2 and batcher.waiting == 0
