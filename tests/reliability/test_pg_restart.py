"""R2 on PostgreSQL: the server killed with SIGKILL (postmaster and backends) and restarted on
the same port and data directory in the middle of a run; crash recovery replays the WAL.

Every COMMIT PostgreSQL acknowledged is in its WAL, so every acknowledged enqueue must complete.
The producer keeps enqueuing through the outage and records which enqueues returned
(acknowledged) and which raised (indeterminate). The worker processes are left alone: their
pools drop the dead connections and reconnect by themselves. Pass: every acknowledged enqueue
completes; no worker process died; any duplicate first ran before the server came back.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.reliability.conftest import StartPg, StartWorkers
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


def postgres_restarts(
    name: str,
    start_pg: StartPg,
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
    server: Any = start_pg()
    url = server.new_database()
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

    def explained(job_id: str, line: Line) -> bool:  # first ran before the server was back
        return any(down - visibility <= line.t <= up for down, up in outages)

    report = check(name, app, producer, ledger, [], began, explained=explained)
    report.extra.update(
        restarts=restarts, outage_s=round(sum(u - d for d, u in outages), 2)
    )  # fmt: skip
    report.publish()
    print("indeterminate enqueues:", *producer.errors[:10], sep="\n  ")
    assert report.lost == [], f"acknowledged enqueues lost: {report.lost[:20]}"
    assert report.unexplained == [], f"unexplained duplicates: {report.unexplained[:20]}"
    assert len(workers.children()) == processes, workers.output()[-3000:]
    workers.signal(signal.SIGTERM)
    assert workers.wait(30) == 0, workers.output()[-3000:]
    app.close()


def test_r2_postgres_restart(
    start_pg: StartPg, ledger: Ledger, start_workers: StartWorkers
) -> None:
    postgres_restarts(
        "R2 PostgreSQL kill -9 + restart", start_pg, ledger, start_workers, jobs=2000, seconds=15
    )
