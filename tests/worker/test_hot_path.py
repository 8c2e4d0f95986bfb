"""Deterministic tests of the worker's hot-path shortcuts: each must decide exactly as before."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.task import SHAPE_CACHE_MAX


def _bind_reason(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    return None


def f(a: int, b: int = 2, /, c: int = 3, *, d: int = 4) -> None:
    """Positional-only, normal and keyword-only parameters."""


def g(a: int, *rest: int, **extra: int) -> None:
    """Variadic."""


CALLS = [
    ([], {}),
    ([1], {}),
    ([1, 2], {}),
    ([1, 2, 3], {}),
    ([1, 2, 3, 4], {}),
    ([1], {"c": 1}),
    ([1], {"d": 1}),
    ([1], {"a": 1}),
    ([1], {"e": 1}),
    ([1], {"e": 1, "z": 2}),
    ([1], {"z": 2, "e": 1}),
    ([1, 2, 3], {"c": 1}),
    ([], {"a": 1}),
    ([1], {"c": 1, "d": 2}),
    ([1], {"d": 2, "c": 1}),
]


@pytest.mark.parametrize("fn", [f, g])
def test_cached_argument_check_matches_signature_bind(fn: Any) -> None:
    task = Conveyor("memory://").task()(fn)
    for _ in range(3):  # first call binds, later ones come from the cache
        for args, kwargs in CALLS:
            assert task.check_arguments(args, kwargs) == _bind_reason(fn, args, kwargs)


def test_cached_verdict_ignores_values_but_not_shape() -> None:
    task = Conveyor("memory://").task()(f)
    assert task.check_arguments([1], {"c": 5}) is None
    assert task.check_arguments(["x"], {"c": object()}) is None  # values never matter to bind
    assert task.check_arguments([1], {"e": 5}) == "got an unexpected keyword argument 'e'"
    assert task.check_arguments([1, 2, 3, 4], {}) == "too many positional arguments"


def test_shape_cache_is_bounded() -> None:
    task = Conveyor("memory://").task()(g)
    for i in range(SHAPE_CACHE_MAX * 3):
        assert task.check_arguments([1], {f"k{i}": i}) is None
    assert len(task._shapes) <= SHAPE_CACHE_MAX
    assert task.check_arguments([], {"k1": 1}) == "missing a required argument: 'a'"


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _slots(concurrency: int) -> tuple[Any, _Clock]:
    from conveyor.worker.slots import Slots

    clock = _Clock()
    return Slots(concurrency, linger=0.002, clock=clock), clock


def _fill(slots: Any, n: int, tag: str = "") -> list[Any]:
    from types import SimpleNamespace

    runs = [SimpleNamespace(token=f"{tag}{i}") for i in range(n)]
    slots.claimed(runs, n)
    return runs


def test_claims_wait_for_a_quarter_of_the_slots_or_an_idle_worker() -> None:
    slots, clock = _slots(16)  # threshold 4
    assert slots.threshold == 4 and slots._claimable(clock())  # nothing running
    runs = _fill(slots, 16)
    assert not slots._claimable(clock())  # all busy
    slots.freed(3)
    assert not slots._claimable(clock())  # 3 free < 4: wait for more (or the linger)
    slots.freed(1)
    assert slots._claimable(clock())  # a quarter is free
    slots.recorded(runs)
    assert slots.busy == 12 and not slots.inflight


def test_a_lone_free_slot_is_claimed_after_the_linger() -> None:
    slots, clock = _slots(100)  # threshold 25: long jobs must not leave slots idle for long
    _fill(slots, 100)
    slots.freed(1)
    assert not slots._claimable(clock())
    clock.t += 0.0019
    assert not slots._claimable(clock())
    clock.t += 0.0002
    assert slots._claimable(clock())


def test_everything_finished_is_claimable_at_once() -> None:
    slots, clock = _slots(100)
    _fill(slots, 10)
    slots.freed(10)
    assert slots._claimable(clock())


def test_unrecorded_outcomes_cap_claiming() -> None:
    slots, clock = _slots(4)
    _fill(slots, 4, "a")
    slots.freed(4)
    _fill(slots, 4, "b")
    slots.freed(4)  # 8 finished, none recorded: 2 x concurrency in flight
    assert slots.busy == 0 and not slots._claimable(clock())


def test_wait_claimable_returns_free_slots_and_honours_stop() -> None:
    import threading

    slots, _ = _slots(8)
    stop = threading.Event()
    assert slots.wait_claimable(stop) == 8
    _fill(slots, 8)
    stop.set()
    assert slots.wait_claimable(stop) == 0  # stopping: returns without waiting


def test_claims_are_capped_so_the_first_jobs_start_early() -> None:
    import threading

    from conveyor.worker.slots import MIN_BATCH

    slots, _ = _slots(1024)
    assert slots.wait_claimable(threading.Event()) == 256  # a quarter per claim
    slots, _ = _slots(100)
    assert slots.wait_claimable(threading.Event()) == MIN_BATCH


def test_idle_backoff_only_after_repeated_fast_empty_wakeups() -> None:
    from conveyor.worker.slots import IdleBackoff

    b = IdleBackoff(poll_interval=0.5)
    assert b.delay_after_wait(0.2) == 0.0  # a real blocking wait
    assert b.delay_after_wait(0.0001) == 0.0  # one fast wake-up (e.g. a job just arrived)
    assert b.delay_after_wait(0.0001) == 0.0
    assert b.delay_after_wait(0.0001) == 0.05  # a backend that cannot block: stop spinning
    b.claimed()
    assert b.delay_after_wait(0.0001) == 0.0


def test_thread_executor_gives_every_blocking_job_a_thread() -> None:
    import threading
    from types import SimpleNamespace

    from conveyor.worker.executors import ThreadExecutor

    n = 12
    barrier = threading.Barrier(n, timeout=30)  # passes only if all n jobs run at once
    reports: list[Any] = []
    done = threading.Semaphore(0)

    def report(run: Any, result: Any, exc: BaseException | None, tb: str | None) -> None:
        reports.append((run.job.id, result, exc))
        done.release()

    task = SimpleNamespace(is_async=False, fn=lambda i: barrier.wait())
    ex = ThreadExecutor(n, report)
    runs = [_run(task, i) for i in range(n)]
    ex.submit(runs[: n // 2])
    ex.submit(runs[n // 2 :])
    for _ in range(n):
        assert done.acquire(timeout=30)
    assert sorted(r[0] for r in reports) == sorted(f"j{i}" for i in range(n))
    assert all(exc is None for _, _, exc in reports)
    ex.shutdown()


def _run(task: Any, i: int) -> Any:
    from types import SimpleNamespace

    from conveyor.worker.running import Running

    job = SimpleNamespace(id=f"j{i}", args=[i], kwargs={})
    return Running(SimpleNamespace(job=job, token=f"t{i}"), task, "thread", None)  # type: ignore[arg-type]
