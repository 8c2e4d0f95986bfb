"""Middleware is an honest seam: replaceable defaults, declared batch and release hooks, and an
app without the metrics middleware still enqueues, runs, retries, schedules and inspects."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import Any

from conveyor import Conveyor, FakeClock, Job, JobSpec, JobState, Middleware, default_middleware
from conveyor.broker.base import Broker
from conveyor.config import Settings
from conveyor.monitoring.inspect import Inspector
from conveyor.monitoring.metrics import MetricsMiddleware
from conveyor.worker.execute import OK
from conveyor.worker.running import Running
from tests.worker.conftest import FAST, running, wait_until


class Recording(Middleware):
    """Remembers every hook call it receives (name, job ids)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.lock = threading.Lock()

    def note(self, name: str, jobs: Sequence[Job]) -> None:
        with self.lock:
            self.calls.append((name, [job.id for job in jobs]))

    def names(self) -> list[str]:
        with self.lock:
            return [name for name, _ in self.calls]

    def after_enqueue(self, app: Any, job: Job, duplicate: bool) -> None:
        self.note("after_enqueue", [job])

    def after_process(
        self, worker: Any, job: Job, *, outcome: str, duration: float, error: BaseException | None
    ) -> None:
        self.note(f"after_process:{outcome}", [job])

    def on_release(self, worker: Any, job: Job) -> None:
        self.note("on_release", [job])


class Batched(Middleware):
    """Implements only the batch hook of completed jobs."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[str], list[float]]] = []

    def after_process_batch(
        self, worker: Any, jobs: Sequence[Job], durations: Sequence[float]
    ) -> None:
        self.batches.append(([job.id for job in jobs], list(durations)))


class EnqueueBatched(Middleware):
    """Implements only the batch hook of enqueues."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, bool]]] = []

    def after_enqueue_batch(
        self, app: Any, jobs: Sequence[Job], duplicates: Sequence[bool]
    ) -> None:
        self.batches.append([(job.id, dup) for job, dup in zip(jobs, duplicates, strict=True)])


def work() -> str:
    """A task body."""
    return "ok"


def test_default_middleware_is_what_an_app_installs(broker: Broker, clock: FakeClock) -> None:
    app = Conveyor(broker, clock=clock)
    assert [type(mw) for mw in app.middleware] == [type(mw) for mw in default_middleware()]
    assert any(isinstance(mw, MetricsMiddleware) for mw in default_middleware())
    assert default_middleware()[0] is not default_middleware()[0]  # fresh instances


def test_a_custom_list_replaces_the_defaults(broker: Broker, clock: FakeClock) -> None:
    mine = Recording()
    app = Conveyor(broker, clock=clock, middleware=[mine])
    assert app.middleware == [mine]
    kept = Conveyor(broker, clock=clock, middleware=[*default_middleware(), Recording()])
    assert [type(mw) for mw in kept.middleware] == [MetricsMiddleware, Recording]


def test_an_app_without_metrics_still_works(broker: Broker, clock: FakeClock) -> None:
    mine = Recording()
    app = Conveyor(broker, clock=clock, rng=random.Random(1), middleware=[mine])
    app.task(work)

    @app.task(max_attempts=1)
    def broken() -> None:
        raise RuntimeError("no")

    done = app.enqueue("work")
    failed = app.enqueue("broken")
    later = app.enqueue_many([JobSpec("work", (), {}, {"delay": 5})])[0]
    assert app.worker().run_until_idle() == 2
    assert done.refresh().state is JobState.COMPLETED
    assert failed.refresh().state is JobState.DEAD_LETTER
    clock.advance(10)
    scheduler = app.scheduler()
    scheduler.tick()
    assert scheduler.promoted == 1
    assert app.worker().run_until_idle() == 1
    assert later.refresh().state is JobState.COMPLETED
    assert Inspector(app).metrics(minutes=5)["summary"]["processed"] == 0  # nothing counted
    seen: list[str] = []

    class Capture:
        def notify(self, payload: Any) -> bool:
            seen.append(str(payload.get("state")))
            return True

    app.alerts.notifiers = [Capture()]
    app.alerts.interval = 0
    app.alerts.add_rule({"name": "backlog", "type": "queue_depth", "threshold": 1})
    app.enqueue_many([JobSpec("work", (), {}, {}) for _ in range(2)])
    clock.advance(1)
    scheduler.tick()
    assert seen == ["firing"]
    assert mine.names().count("after_enqueue") == 5
    assert sorted(n for n in mine.names() if n.startswith("after_process")) == [
        "after_process:completed",
        "after_process:completed",
        "after_process:dead_letter",
    ]


def _claim_all(app: Conveyor, count: int) -> list[Running]:
    leases = app.broker.claim(
        ["default"], app.now(), limit=count, worker_id="w", visibility_timeout=30, max_lost=3
    )
    assert len(leases) == count
    return [Running(lease, app.tasks.get(lease.job.task), "inline", None) for lease in leases]


def test_the_batch_hook_is_called_once_per_batch(broker: Broker, clock: FakeClock) -> None:
    batched, per_job = Batched(), Recording()
    app = Conveyor(broker, clock=clock, middleware=[per_job, batched])
    app.task(work)
    ids = [h.id for h in app.enqueue_many([JobSpec("work", (), {}, {}) for _ in range(5)])]
    worker = app.worker()
    runs = _claim_all(app, 5)
    names = worker.recorder.record([(run, OK) for run in runs], app.now())
    assert names == ["completed"] * 5
    assert len(batched.batches) == 1 and sorted(batched.batches[0][0]) == sorted(ids)
    assert len(batched.batches[0][1]) == 5
    # a middleware with only the per-job hook still gets one call per job
    assert per_job.names().count("after_process:completed") == 5


def test_the_enqueue_batch_hook_is_called_once_per_enqueue_many(
    broker: Broker, clock: FakeClock
) -> None:
    batched = EnqueueBatched()
    app = Conveyor(broker, clock=clock, middleware=[batched])
    app.task(work)
    specs = [JobSpec("work", (), {}, {}), JobSpec("work", (), {}, {"idempotency_key": "k"})]
    first = app.enqueue_many(specs)
    again = app.enqueue_many([JobSpec("work", (), {}, {"idempotency_key": "k"})])
    assert again[0].id == first[1].id and again[0].duplicate
    assert len(batched.batches) == 2
    assert batched.batches[0] == [(first[0].id, False), (first[1].id, False)]
    assert [dup for _, dup in batched.batches[1]] == [True]


def test_a_released_job_calls_on_release(broker: Broker) -> None:
    mine = Recording()
    app = Conveyor(broker, settings=Settings(**FAST), middleware=[mine])  # type: ignore[arg-type]
    started, gate = threading.Event(), threading.Event()

    @app.task
    def slow() -> None:
        started.set()
        gate.wait(10)

    job = slow.enqueue()
    with running(app, shutdown_timeout=0.2):
        assert started.wait(10)
    gate.set()
    wait_until(lambda: job.refresh().state is JobState.PENDING)
    assert ("on_release", [job.id]) in mine.calls
    assert not [n for n in mine.names() if n.startswith("after_process")]
