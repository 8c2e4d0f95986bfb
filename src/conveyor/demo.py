"""The ``conveyor demo``: a one-minute tour on the embedded default (or any URL).

It registers sample tasks (most succeed, some fail transiently then succeed, some fail
permanently, some are delayed, one interval schedule fires), enqueues a few hundred jobs, runs a
worker and the scheduler in threads, then summarises what happened. It never flushes the
broker: it tracks the ids it enqueued, so it is safe to point at a shared Redis.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .app import Conveyor
from .core.backoff import Backoff
from .core.job import Job
from .core.state import TERMINAL_STATES, JobState
from .errors import PermanentError
from .task import JobSpec

DEMO_QUEUE = "demo"
DEMO_URL = "sqlite:///conveyor-demo.db"
SCHEDULE_NAME = "demo.heartbeat"


class TransientError(Exception):
    """A failure worth retrying (a flaky upstream API)."""


class _FlakyCounter:
    """Counts calls per request so a flaky job fails its first ``n`` calls, then succeeds."""

    def __init__(self) -> None:
        self._calls: Counter[int] = Counter()
        self._lock = threading.Lock()

    def call(self, request_id: int) -> int:
        with self._lock:
            self._calls[request_id] += 1
            return self._calls[request_id]


def build_demo_app(url: str | None) -> Conveyor:
    """An app with the demo's tasks and its interval schedule registered."""
    app = Conveyor(url or DEMO_URL)
    flaky = _FlakyCounter()
    fast_backoff = Backoff.exponential(base=0.2, factor=2, max=2, jitter=0.1)

    @app.task(name="demo.resize_image", queue=DEMO_QUEUE)
    def resize_image(image_id: int) -> dict[str, Any]:
        time.sleep(0.002 + (image_id % 5) / 1000)  # pretend to work
        return {"image": image_id, "size": "128x128"}

    @app.task(name="demo.call_flaky_api", queue=DEMO_QUEUE, max_attempts=4, backoff=fast_backoff)
    def call_flaky_api(request_id: int, fail_times: int) -> str:
        call = flaky.call(request_id)
        if call <= fail_times:
            raise TransientError(f"upstream timed out (call {call})")
        return "ok"

    @app.task(name="demo.charge_card", queue=DEMO_QUEUE)
    def charge_card(order_id: int) -> None:
        raise PermanentError(f"card declined for order {order_id}")

    @app.task(name="demo.send_report", queue=DEMO_QUEUE)
    def send_report(report_id: int) -> str:
        return f"report {report_id} sent"

    # A short grace: re-running the demo on an old database is an outage, caught up once.
    @app.every(2, name=SCHEDULE_NAME, queue=DEMO_QUEUE, misfire_grace=5)
    @app.task(name="demo.heartbeat", queue=DEMO_QUEUE)
    def heartbeat() -> str:
        return "tick"

    return app


@dataclass
class DemoRun:
    """What the demo enqueued, and what became of it."""

    kinds: dict[str, str] = field(default_factory=dict)  # job id -> expected behaviour
    jobs: list[Job] = field(default_factory=list)
    schedule_jobs: int = 0
    seconds: float = 0.0
    started_at: float = 0.0  # app clock


def demo_specs(app: Conveyor, n: int) -> list[tuple[JobSpec, str]]:
    """A fixed mix of ``n`` jobs: mostly successes, some flaky, permanent and delayed ones."""
    t = app.tasks
    out: list[tuple[JobSpec, str]] = []
    for i in range(n):
        if i % 10 == 3:
            out.append((t["demo.charge_card"].spec(i), "permanent failure"))
        elif i % 7 == 1:
            out.append((t["demo.call_flaky_api"].spec(i, 1 + i % 2), "transient failures"))
        elif i % 9 == 5:
            delayed = t["demo.send_report"].options(delay=1.0 + (i % 3) / 2)
            out.append((delayed.spec(i), "delayed"))
        else:
            out.append((t["demo.resize_image"].spec(i), "succeeds"))
    return out


def run_demo(
    app: Conveyor, n: int, on_progress: Callable[[int, int], None], deadline: float = 50.0
) -> DemoRun:
    """Enqueue, run a worker and the scheduler until every demo job is finished."""
    run = DemoRun(started_at=app.now() - 2.5)  # a tick due just before the start counts
    specs = demo_specs(app, n)
    started = time.monotonic()
    for job, (_, kind) in zip(app.enqueue_many([s for s, _ in specs]), specs, strict=True):
        run.kinds[job.id] = kind
    worker = app.worker(queues=[DEMO_QUEUE], concurrency=8)
    scheduler = app.scheduler()
    threads = [
        threading.Thread(target=worker.run, daemon=True),
        threading.Thread(target=scheduler.run, daemon=True),
    ]
    for th in threads:
        th.start()
    try:
        _wait_until_done(app, run, on_progress, started + deadline)
    finally:
        worker.stop(timeout=5)
        scheduler.stop()
        for th in threads:
            th.join(timeout=10)
    run.seconds = time.monotonic() - started
    return run


def _wait_until_done(
    app: Conveyor, run: DemoRun, on_progress: Callable[[int, int], None], deadline: float
) -> None:
    ids = list(run.kinds)
    while True:
        jobs = [j for j in (app.broker.get(i) for i in ids) if j is not None]
        done = sum(1 for j in jobs if j.state in TERMINAL_STATES)
        on_progress(done, len(ids))
        run.schedule_jobs = _schedule_runs(app, run.started_at)
        if (done == len(ids) and run.schedule_jobs > 0) or time.monotonic() > deadline:
            run.jobs = jobs
            return
        time.sleep(0.1)


def _schedule_runs(app: Conveyor, since: float) -> int:
    """Schedule runs completed during this demo (the file may hold earlier demos' jobs)."""
    page = app.search(task="demo.heartbeat", state=JobState.COMPLETED, since=since, page_size=1)
    return page.total


@dataclass
class DemoSummary:
    """Numbers the demo prints at the end."""

    total: int
    completed: int
    retried_then_completed: int
    dead_lettered: int
    dead_reasons: dict[str, int]
    delayed_completed: int
    unfinished: int
    p50_ms: float
    p95_ms: float
    schedule_runs: int
    seconds: float


def summarise(run: DemoRun) -> DemoSummary:
    """Count outcomes and run-time percentiles of the demo's jobs."""
    jobs = run.jobs
    completed = [j for j in jobs if j.state is JobState.COMPLETED]
    dead = [j for j in jobs if j.state is JobState.DEAD_LETTER]
    reasons = Counter((j.last_error or "?").split(" for order")[0] for j in dead)
    runtimes = sorted(
        ((j.finished_at or 0) - (j.started_at or 0)) * 1000 for j in completed if j.started_at
    )
    p95 = runtimes[min(len(runtimes) - 1, int(len(runtimes) * 0.95))] if runtimes else 0.0
    return DemoSummary(
        total=len(run.kinds),
        completed=len(completed),
        retried_then_completed=sum(1 for j in completed if j.attempts > 1),
        dead_lettered=len(dead),
        dead_reasons=dict(reasons),
        delayed_completed=sum(1 for j in completed if run.kinds.get(j.id) == "delayed"),
        unfinished=len(run.kinds) - len(completed) - len(dead),
        p50_ms=statistics.median(runtimes) if runtimes else 0.0,
        p95_ms=p95,
        schedule_runs=run.schedule_jobs,
        seconds=run.seconds,
    )
