"""R4: a poison pill — a job that kills the worker process running it (``os._exit``) — among
normal jobs, on Redis and on a SQLite file. Each delivery of the pill costs a worker process
(the supervisor starts a new one); after ``max_lost`` (3) lost deliveries the pill goes to
``dead_letter`` with kind ``worker_lost`` and is never run again. Every other job completes.
"""

from __future__ import annotations

import signal
import time

import pytest

from conveyor import JobState
from tests.reliability.conftest import StartWorkers
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

MAX_LOST = 3
PILL = 1_000_000  # the pill's job number


def poison_pill(
    name: str,
    url: str,
    ledger: Ledger,
    start_workers: StartWorkers,
    *,
    jobs: int,
    rate: float,
    processes: int = 3,
) -> None:
    """Run the scenario and assert the R4 pass criteria."""
    app = checker_app(url)
    # Concurrency 1: a process dies with only the pill (and at most one finished job whose ack
    # was still on its way), so no normal job keeps sharing the pill's fate until max_lost.
    workers = start_workers(
        url,
        "-p",
        str(processes),
        "-c",
        "1",
        "--visibility-timeout",
        "2",
        CONVEYOR_MAX_LOST=str(MAX_LOST),
    )
    workers.wait_ready(processes)
    began = time.monotonic()
    load = short_jobs(jobs, seed=3)
    load.insert(jobs // 4, (PILL, "poison", [PILL]))
    producer = Producer(url, load, rate=rate)
    producer.start()
    producer.join(timeout=120)
    assert not producer.failed, producer.errors[:5]
    pill = app.get_job(f"job-{PILL}")
    wait_until(lambda: pill.refresh().state is JobState.DEAD_LETTER, 60, "the pill's dead letter")
    wait_settled(app, jobs, timeout=60, dead=1)
    pill.refresh()
    assert pill.lost == MAX_LOST and pill.attempts == MAX_LOST
    assert pill.errors and pill.errors[-1]["kind"] == "worker_lost", pill.errors
    killers = {ln.pid for ln in ledger.starts()[PILL]}
    assert len(ledger.starts()[PILL]) == MAX_LOST == len(killers)  # each run killed a process
    wait_until(lambda: len(workers.children()) == processes + MAX_LOST, 30, "the replacements")

    def explained(job_id: str, line: Line) -> bool:  # ran beside the pill in a process it killed
        return line.pid in killers

    report = check(name, app, producer, ledger, [], began, explained=explained, exclude=[PILL])
    report.extra.update(
        pill_deliveries=len(killers), pill_state=str(pill.state), pill_error=pill.errors[-1]["kind"]
    )
    report.publish()
    assert report.lost == [] and report.completed == jobs, f"lost: {report.lost[:20]}"
    assert report.unexplained == [], f"unexplained duplicates: {report.unexplained[:20]}"
    # Nothing runs the pill again: no start after it was dead-lettered.
    assert len(ledger.starts()[PILL]) == MAX_LOST
    workers.signal(signal.SIGTERM)
    assert workers.wait(30) == 0, workers.output()[-3000:]
    app.close()


def test_r4_poison_pill(shared_url: str, ledger: Ledger, start_workers: StartWorkers) -> None:
    backend = shared_url.split(":", 1)[0]
    poison_pill(
        f"R4 poison pill ({backend})", shared_url, ledger, start_workers, jobs=500, rate=100
    )


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_r4_poison_pill_soak(shared_url: str, ledger: Ledger, start_workers: StartWorkers) -> None:
    backend = shared_url.split(":", 1)[0]
    poison_pill(
        f"R4 poison pill soak ({backend})",
        shared_url,
        ledger,
        start_workers,
        jobs=5000,
        rate=250,
        processes=4,
    )
