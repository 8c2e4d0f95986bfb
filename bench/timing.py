"""On-time delivery, measured with real time on each backend (issue 13, docs/reliability.md).

For each backend (memory, SQLite in a temp dir, and Redis when ``--redis URL`` is given):

* lease return: a job is dequeued with ``visibility_timeout=0.1`` and never acked; a consumer
  calls ``app.dequeue()`` every millisecond. Lateness = when it gets the job again - deadline.
* delayed start: an idle worker; a job enqueued with ``delay=0.1``. Lateness = handler start -
  run_at.
* retry start: a task failing twice with ``Backoff.fixed(0.01)``. Lateness = start of attempts
  2 and 3 - the retry's run_at (from the ``retry_scheduled`` events).
* idle load: an idle worker (concurrency 4) for ``--idle`` seconds: claims and waits per second,
  and on Redis the commands per second (INFO commandstats; a baseline without a worker is
  subtracted).

Settings are the defaults that matter here (poll_interval 0.5 s, reap_interval 2 s). Only the
public API is used, so the same script measures older versions (``PYTHONPATH=old/src``).

    .venv/bin/python bench/timing.py [--redis redis://127.0.0.1:6379/0] [--samples 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from typing import Any

from conveyor import Backoff, Conveyor, JobState
from conveyor.config import Settings

SETTINGS = {"poll_interval": 0.5, "reap_interval": 2.0, "heartbeat_interval": 5.0}


def _app(url: str) -> Conveyor:
    app = Conveyor(url, settings=Settings(**SETTINGS), rng=random.Random(1))  # type: ignore[arg-type]
    app.broker.flush_all()
    return app


def _wait(pred: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError("condition not met")
        time.sleep(0.002)


class _Running:
    """A worker in a thread for a ``with`` block."""

    def __init__(self, app: Conveyor, **options: Any) -> None:
        self.worker = app.worker(handle_signals=False, heartbeat=True, **options)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def __enter__(self) -> Any:
        self.thread.start()
        _wait(lambda: self.worker.started_at is not None)
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.worker.stop(timeout=5.0)
        self.thread.join(10)


def lease_return(url: str, samples: int) -> list[float]:
    """Lateness of the redelivery of an expired lease to a polling ``dequeue`` consumer."""
    app, out = _app(url), []
    for _ in range(samples):
        app.enqueue("never.acked")
        first = app.dequeue(visibility_timeout=0.1)
        assert first is not None
        deadline = first.job.lease_expires_at
        while (again := app.dequeue(visibility_timeout=30.0)) is None:
            time.sleep(0.001)
        out.append(app.now() - deadline)
        again.nack(delay=3600)  # out of the way
    app.close()
    return out


def delayed_start(url: str, samples: int) -> list[float]:
    """Lateness of a job enqueued with a 100 ms delay on an idle worker."""
    app, started = _app(url), {}

    @app.task
    def delayed(tag: str) -> None:
        started[tag] = app.now()

    out = []
    with _Running(app, concurrency=2):
        for n in range(samples):
            time.sleep(0.2)
            due = delayed.options(delay=0.1).enqueue(f"d{n}").refresh().run_at
            _wait(lambda n=n: f"d{n}" in started)
            out.append(started[f"d{n}"] - due)
    app.close()
    return out


def retry_start(url: str, samples: int) -> list[float]:
    """Lateness of attempts 2 and 3 of a task failing twice with a 10 ms fixed backoff."""
    app, attempts = _app(url), {}

    @app.task(max_attempts=3, backoff=Backoff.fixed(0.01))
    def flaky(tag: str) -> None:
        times = attempts.setdefault(tag, [])
        times.append(app.now())
        if len(times) < 3:
            raise RuntimeError("fails")

    handles = []
    with _Running(app, concurrency=2):
        for n in range(samples):
            time.sleep(0.2)
            handles.append(flaky.enqueue(f"r{n}"))
            _wait(lambda h=handles[-1]: h.refresh().state is JobState.COMPLETED)
    tags = {h.id: f"r{n}" for n, h in enumerate(handles)}
    seen: dict[str, int] = {}
    out = []
    cursor = None
    while True:
        events, cursor = app.broker.events_read(cursor, limit=500)
        if not events:
            break
        for event in events:
            if event["type"] == "retry_scheduled":
                tag = tags[event["job_id"]]
                seen[tag] = seen.get(tag, 0) + 1
                out.append(attempts[tag][seen[tag]] - float(event["run_at"]))
    app.close()
    return out


def _redis_calls(app: Conveyor) -> int:
    stats = app.broker.client.info("commandstats")  # type: ignore[attr-defined]
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def idle_load(url: str, seconds: float) -> dict[str, float]:
    """Claims and waits per second of an idle worker; Redis commands per second."""
    app = _app(url)
    broker = app.broker
    counts = {"claim": 0, "wait": 0}
    real_claim, real_wait = broker.claim, broker.wait_for_work

    def claim(*args: Any, **kwargs: Any) -> Any:
        counts["claim"] += 1
        return real_claim(*args, **kwargs)

    def wait(*args: Any, **kwargs: Any) -> Any:
        counts["wait"] += 1
        return real_wait(*args, **kwargs)

    broker.claim, broker.wait_for_work = claim, wait  # type: ignore[method-assign]
    redis = url.startswith("redis")
    out: dict[str, float] = {}
    if redis:
        before = _redis_calls(app)
        time.sleep(seconds)
        out["baseline_cmds_s"] = (_redis_calls(app) - before) / seconds
    with _Running(app, concurrency=4):
        time.sleep(1.0)
        c0, w0 = counts["claim"], counts["wait"]
        r0 = _redis_calls(app) if redis else 0
        time.sleep(seconds)
        out["claims_s"] = (counts["claim"] - c0) / seconds
        out["waits_s"] = (counts["wait"] - w0) / seconds
        if redis:
            out["cmds_s"] = (_redis_calls(app) - r0) / seconds - out["baseline_cmds_s"]
    app.close()
    return out


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (
        f"median {statistics.median(values) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms,"
        f" max {ordered[-1] * 1000:.1f} ms (n={len(values)})"
    )


def main() -> None:
    """Measure every backend and print one block per backend."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", help="a Redis URL (its database is flushed)")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle measurement")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="conveyor-timing-")
    urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/timing.db"}
    if args.redis:
        urls["redis"] = args.redis
    for name, url in urls.items():
        print(f"## {name}")
        print(f"lease return:  {_ms(lease_return(url, args.samples))}")
        print(f"delayed start: {_ms(delayed_start(url, args.samples))}")
        print(f"retry start:   {_ms(retry_start(url, max(2, args.samples // 2)))}")
        idle = idle_load(url, args.idle)
        print("idle:          " + ", ".join(f"{k} {v:.1f}" for k, v in idle.items()))


if __name__ == "__main__":
    main()
