"""Seed 002, "Lab 04: Task Scheduler", done with Conveyor.

The lab builds a thread pool that runs tasks by priority (lower number first), retries failures
with exponential backoff, sends tasks that exhaust ``max_attempts`` to a dead-letter list, and
shuts down gracefully within a timeout. The mapping onto Conveyor:

    TaskScheduler(n_workers, base_backoff)  ->  app.worker(concurrency=n_workers) and
                                                @app.task(backoff=Backoff.exponential(base=...))
    start()                                 ->  threading.Thread(target=worker.run).start()
    submit(fn, priority, max_attempts)      ->  task.options(priority=p, max_attempts=n).enqueue()
    shutdown(timeout)                       ->  worker.stop(timeout=...) (returns once drained)
    dead_letters() -> [FailedTask]          ->  app.dead_letters() -> jobs with attempts,
                                                last_error ("Type: message") and errors[]

Conveyor picks ready jobs by priority, then FIFO (docs/design.md section 4), which is what the lab's
own test expects; the lab's reference heap, keyed on ``(ready_at, priority)``, gets it wrong.

This one uses real threads and the real clock (``memory://`` broker). It never sleeps for a
fixed time to "let things happen": it waits on conditions with deadlines.
Run it: ``python tests/seeds/seed002_priority_pool.py``.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conveyor import Backoff, Conveyor, JobState
from conveyor.config import Settings

if TYPE_CHECKING:
    from conveyor.worker.loop import Worker

DEADLINE = 20.0  # seconds any single wait may take before the scenario gives up


def wait_until(
    predicate: Callable[[], bool], timeout: float = DEADLINE, what: str = "condition"
) -> float:
    """Poll ``predicate`` until true; return the seconds waited, raise after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.002)
    return time.monotonic() - start


def _app() -> Conveyor:
    # A short idle poll so delayed retries are picked up quickly; the rng makes jitter exact.
    return Conveyor("memory://", rng=random.Random(4), settings=Settings(poll_interval=0.02))


def _start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, name=f"worker-{worker.id}", daemon=True)
    thread.start()
    return thread


def _stop(worker: Worker, thread: threading.Thread, timeout: float) -> float:
    """``shutdown(timeout)``: ask the worker to drain, then wait for its thread (bounded)."""
    start = time.monotonic()
    worker.stop(timeout=timeout)
    thread.join(timeout + DEADLINE)
    if thread.is_alive():
        raise TimeoutError("worker thread did not stop")
    return time.monotonic() - start


def _failed_task(job: Any) -> dict[str, Any]:
    """The lab's ``FailedTask`` fields, read from a dead-lettered job."""
    return {
        "id": job.id,
        "task": job.task,
        "attempts": job.attempts,
        "last_error": job.last_error,
        "errors": [(e["attempt"], e["kind"], e["message"]) for e in job.errors],
    }


def priority_order() -> dict[str, Any]:
    """The lab's test_priority_order: one worker; priorities 3, 1, 2 run as 1, 2, 3."""
    app = _app()
    order: list[int] = []

    @app.task(queue="ordered")
    def record(p: int) -> None:
        order.append(p)

    worker = app.worker(["ordered"], concurrency=1)
    thread = _start(worker)  # started first, as in the lab
    # All three arrive together (enqueue_many is atomic), so the worker chooses among them.
    app.enqueue_many([record.options(priority=p).spec(p) for p in (3, 1, 2)])
    wait_until(lambda: len(order) == 3, what="three jobs")
    _stop(worker, thread, timeout=2.0)
    return {"submitted": [3, 1, 2], "order": list(order)}


def pool_with_retries_and_dead_letters() -> dict[str, Any]:
    """test_retry_then_dlq + test_concurrent_submit on one 4-thread worker."""
    app = _app()
    results: list[tuple[int, int]] = []
    failures: list[float] = []
    lock = threading.Lock()

    @app.task
    def push_result(i: int, j: int) -> None:
        with lock:
            results.append((i, j))

    @app.task(max_attempts=3, backoff=Backoff.exponential(base=0.01, factor=2, jitter=0.1))
    def always_fail() -> None:
        failures.append(time.monotonic())
        raise RuntimeError("boom")

    worker = app.worker(concurrency=4)
    thread = _start(worker)
    failing = always_fail.options(priority=0).enqueue()

    def producer(i: int) -> None:  # the lab's concurrent submitters
        for j in range(50):
            push_result.enqueue(i, j)

    producers = [threading.Thread(target=producer, args=(i,)) for i in range(4)]
    for p in producers:
        p.start()
    for p in producers:
        p.join()
    wait_until(lambda: len(results) == 200, what="200 results")
    wait_until(lambda: app.get_job(failing.id).state is JobState.DEAD_LETTER, what="dead letter")
    _stop(worker, thread, timeout=2.0)

    dead = app.dead_letters()
    gaps = [b - a for a, b in itertools.pairwise(failures)]
    return {
        "results": len(results),
        "distinct_results": len(set(results)),
        "failing_id": failing.id,
        "failing_calls": len(failures),
        "retry_gaps": gaps,
        "dead_letters": [_failed_task(d) for d in dead],
        "completed": app.stats()["queues"]["default"]["completed"],
        "worker_processed": worker.processed,
    }


def graceful_shutdown(timeout: float = 0.5) -> dict[str, Any]:
    """``shutdown(timeout)``: finish what is running, give back what cannot finish in time.

    Two slots, both busy: ``finishes`` ends as soon as the drain has begun, ``stuck`` outlasts
    the timeout; two more jobs wait in the queue. Nothing may be lost.
    """
    app = _app()
    release_finishes = threading.Event()
    release_stuck = threading.Event()
    running: list[str] = []

    @app.task
    def slow(label: str) -> str:
        running.append(label)
        (release_finishes if label == "finishes" else release_stuck).wait(DEADLINE)
        return label

    @app.task
    def later(n: int) -> int:
        return n

    worker = app.worker(concurrency=2)
    thread = _start(worker)
    finishes = slow.enqueue("finishes")
    stuck = slow.enqueue("stuck")
    wait_until(lambda: len(running) == 2, what="both slots busy")
    queued = [later.enqueue(n) for n in (1, 2)]  # no free slot: they wait in the queue

    stopped: dict[str, Any] = {}

    def shutdown() -> None:  # the lab's shutdown(timeout), called from another thread
        t = time.monotonic()
        worker.stop(timeout=timeout)
        stopped["seconds"] = time.monotonic() - t
        stopped["run_alive"] = thread.is_alive()

    t0 = time.monotonic()
    stopper = threading.Thread(target=shutdown, name="shutdown")
    stopper.start()
    wait_until(lambda: worker.describe()["state"] == "draining", what="the drain to begin")
    release_finishes.set()  # the in-flight job completes during the drain
    # The stuck job must be handed back once the drain timeout has passed.
    wait_until(lambda: app.get_job(stuck.id).state is JobState.PENDING, what="stuck released")
    released_after = time.monotonic() - t0
    stopper.join(DEADLINE + timeout)
    release_stuck.set()  # let the abandoned call return; its late result is ignored
    thread.join(DEADLINE)

    def snap(job_id: str) -> dict[str, Any]:
        job = app.get_job(job_id)
        return {
            "state": str(job.state),
            "attempts": job.attempts,
            "history": [h["event"] for h in job.history],
        }

    return {
        "timeout": timeout,
        "stop_call_seconds": stopped.get("seconds"),
        "run_alive_when_stop_returned": stopped.get("run_alive"),
        "stuck_released_after": released_after,
        "run_exited": not thread.is_alive(),
        "finishes": snap(finishes.id),
        "stuck": snap(stuck.id),
        "queued": [snap(j.id) for j in queued],
        "dead_letters": len(app.dead_letters()),
    }


def run_scenario() -> dict[str, dict[str, Any]]:
    """Priorities, retries to the dead-letter queue, concurrent submits, graceful shutdown."""
    return {
        "priority": priority_order(),
        "pool": pool_with_retries_and_dead_letters(),
        "shutdown": graceful_shutdown(),
    }


def main() -> None:
    # The worker logs every failed attempt; this narrative reports them itself.
    logging.getLogger("conveyor").setLevel(logging.ERROR)
    f = run_scenario()
    print(
        "Seed 002 (Lab 04): a priority worker pool with retries, a dead-letter queue and "
        "graceful shutdown, on Conveyor (memory://, real threads)"
    )

    pr = f["priority"]
    print("\nPriorities (lower runs first), one worker thread:")
    print(f"  submitted {pr['submitted']} -> ran {pr['order']}")

    pool = f["pool"]
    print("\nA 4-thread pool: 4 producers x 50 submits, plus one task that always fails:")
    print(
        f"  {pool['results']} results ({pool['distinct_results']} distinct), "
        f"{pool['completed']} jobs completed"
    )
    gaps = ", ".join(f"{g * 1000:.0f} ms" for g in pool["retry_gaps"])
    print(
        f"  always_fail ran {pool['failing_calls']} times (max_attempts=3), "
        f"waits between runs: {gaps}"
    )
    for d in pool["dead_letters"]:
        print(
            f"  dead_letters(): {d['task']} attempts={d['attempts']} last_error={d['last_error']!r}"
        )
        for attempt, kind, message in d["errors"]:
            print(f"    attempt {attempt}: {kind}: {message}")

    sd = f["shutdown"]
    print(f"\nGraceful shutdown: stop(timeout={sd['timeout']:g}) with both slots busy:")
    print(f"  'finishes' (completes during the drain): {sd['finishes']['state']}")
    print(
        f"  'stuck' (outlasts the timeout): {sd['stuck']['state']}, attempts="
        f"{sd['stuck']['attempts']} (handed back {sd['stuck_released_after']:.2f} s after "
        f"stop, no attempt charged; history {sd['stuck']['history']})"
    )
    print(
        "  queued jobs: "
        + ", ".join(q["state"] for q in sd["queued"])
        + " (never started, still in the queue)"
    )
    print(f"  dead letters created by the shutdown: {sd['dead_letters']}")
    run_state = "still running" if sd["run_alive_when_stop_returned"] else "finished"
    print(
        f"  stop(timeout={sd['timeout']:g}) returned after {sd['stop_call_seconds']:.2f} s, "
        f"with run() {run_state}"
    )


if __name__ == "__main__":
    main()
