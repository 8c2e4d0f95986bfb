"""R2: Redis killed with SIGKILL and restarted (same port, same directory) in the middle of a run.

Redis runs with AOF and ``appendfsync always``, so every write it acknowledged is on disk before
the reply. The producer keeps enqueuing through the outage and records which enqueues returned
(acknowledged) and which raised (indeterminate). The worker processes are left alone: they must
ride out the outage and carry on by themselves. Pass: every acknowledged enqueue completes; an
indeterminate one either never existed or completed; no worker process died; any duplicate ran
first before Redis came back.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.reliability.conftest import StartRedis, StartWorkers
from tests.reliability.harness import (
    Ledger,
    Line,
    Producer,
    check,
    checker_app,
    short_jobs,
    wait_settled,
    wait_until,
)

pytestmark = pytest.mark.slow


def redis_restarts(
    name: str,
    start_redis: StartRedis,
    ledger: Ledger,
    start_workers: StartWorkers,
    *,
    jobs: int,
    seconds: float,
    restarts: int = 1,
    processes: int = 4,
    concurrency: int = 4,
    visibility: float = 5.0,
    downtime: float = 1.0,
    seed: int = 2,
) -> None:
    """Run the scenario and assert the R2 pass criteria."""
    server = start_redis(aof=True)  # appendfsync always
    url = server.url
    app = checker_app(url)
    workers = start_workers(
        url,
        "-p",
        str(processes),
        "-c",
        str(concurrency),
        "--visibility-timeout",
        str(visibility),
        "--shutdown-timeout",
        "10",
    )
    workers.wait_ready(processes)
    began = time.monotonic()
    producer = Producer(url, short_jobs(jobs, seed), rate=jobs / seconds)
    producer.start()
    outages: list[tuple[float, float]] = []
    for k in range(restarts):
        target = jobs * (k + 1) // (restarts + 1)
        wait_until(
            lambda t=target: producer.attempted >= t,
            seconds + 30,  # type: ignore[misc]
            "the producer to get going",
        )
        failed, seen = len(producer.failed), len(workers.output())
        killed_at = time.time()
        server.kill()
        # Down for at least `downtime` seconds (a fault parameter) and until both sides have felt
        # it: enqueues fail and the worker processes log the outage (outage.py: one line).
        up_at = time.monotonic() + downtime

        def felt(failed: int = failed, seen: int = seen, up_at: float = up_at) -> bool:
            return (
                time.monotonic() >= up_at
                and len(producer.failed) >= failed + 3
                and "lost the connection" in workers.output()[seen:]  # the outage log line
            )

        wait_until(felt, 30, "producer and workers to notice the outage")
        server.start()
        outages.append((killed_at, time.time()))
    producer.join(timeout=seconds + 120)
    assert not producer.is_alive()
    wait_settled(app, len(producer.ok), timeout=90)

    def explained(job_id: str, line: Line) -> bool:  # first ran before Redis was back
        return any(down - visibility <= line.t <= up for down, up in outages)

    report = check(name, app, producer, ledger, [], began, explained=explained)
    back = outages[-1][1]
    first_after = min(
        (ln.t for ln in ledger.read() if ln.event == "done" and ln.t > back), default=float("nan")
    )
    report.extra.update(
        restarts=restarts,
        outage_s=round(sum(u - d for d, u in outages), 2),
        first_done_after_restart_s=round(first_after - back, 2),
    )
    report.publish()
    print("indeterminate enqueues:", *producer.errors[:10], sep="\n  ")
    assert report.lost == [], f"acknowledged enqueues lost: {report.lost[:20]}"
    assert report.unexplained == [], f"unexplained duplicates: {report.unexplained[:20]}"
    # The worker processes recovered by themselves: none died, none was replaced.
    assert len(workers.children()) == processes, workers.output()[-3000:]
    workers.signal(signal.SIGTERM)
    assert workers.wait(30) == 0, workers.output()[-3000:]
    app.close()


def test_r2_redis_restart(
    start_redis: StartRedis, ledger: Ledger, start_workers: StartWorkers
) -> None:
    redis_restarts(
        "R2 Redis kill -9 + restart", start_redis, ledger, start_workers, jobs=2000, seconds=15
    )


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_r2_redis_restart_soak(
    start_redis: StartRedis, ledger: Ledger, start_workers: StartWorkers
) -> None:
    redis_restarts(
        "R2 Redis kill -9 + restart soak",
        start_redis,
        ledger,
        start_workers,
        jobs=20_000,
        seconds=120,
        restarts=4,
        seed=8,
    )
