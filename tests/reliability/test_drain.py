"""R5: graceful drain under load. A worker supervisor (2 processes x 4 slots) gets SIGTERM while
jobs stream in; a new supervisor starts at the same moment (a rolling deploy). In-flight jobs
either finish within the shutdown timeout or are released at once; the new workers run the
released jobs right away. The lease is 60 s, so waiting for it to expire would fail the test's
deadline. Pass: the old supervisor exits 0 promptly, nothing is lost, every re-run job was
released (its history says so) and picked up within seconds.
"""

from __future__ import annotations

import signal
import time

import pytest

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

VISIBILITY = 60.0
GRACE = 1.0  # --shutdown-timeout
LONG = 3.0  # seconds a long job runs: longer than GRACE, so it is released


def test_r5_graceful_drain_under_load(
    redis_url: str, ledger: Ledger, start_workers: StartWorkers
) -> None:
    app = checker_app(redis_url)
    args = (
        "-p",
        "2",
        "-c",
        "4",
        "--visibility-timeout",
        str(VISIBILITY),
        "--shutdown-timeout",
        str(GRACE),
    )
    old = start_workers(redis_url, *args)
    old.wait_ready(2)
    began = time.monotonic()
    load = short_jobs(1000, seed=5)
    long_jobs = set()
    for n in range(0, 1000, 50):  # every 50th job runs for LONG seconds
        load[n] = (n, "work", [n, LONG])
        long_jobs.add(n)
    producer = Producer(redis_url, load, rate=100)
    producer.start()
    old_pids = set(old.wait_ready(2))

    def long_in_flight_on_old() -> bool:
        starts, done = ledger.starts(), ledger.done()
        return any(
            ln.pid in old_pids and not done.get(n) for n in long_jobs for ln in starts.get(n, [])
        )

    wait_until(
        lambda: producer.attempted >= 400 and long_in_flight_on_old(),
        30,
        "load with a long job in flight",
    )
    term_at = time.time()
    old.signal(signal.SIGTERM)
    new = start_workers(redis_url, *args)
    assert old.wait(GRACE + 15) == 0, old.output()[-3000:]
    exit_s = time.time() - term_at
    assert exit_s < GRACE + 5, f"the old workers took {exit_s:.1f}s to stop"
    producer.join(timeout=60)
    assert not producer.failed, producer.errors[:5]
    # Far less than the 60 s lease: released jobs must not wait for expiry.
    wait_settled(app, len(producer.ok), timeout=VISIBILITY - 20)

    new_pids = set(new.children())
    released: dict[int, float] = {}  # n -> seconds from SIGTERM to the new run's start
    finished_in_drain = 0
    done = ledger.done()
    for n, lines in ledger.starts().items():
        on_old = [ln for ln in lines if ln.pid in old_pids]
        if not on_old:
            continue
        if any(d.pid in old_pids for d in done.get(n, [])):
            assert len(lines) == 1, f"job {n} finished on the old workers but ran again: {lines}"
            finished_in_drain += any(d.t >= term_at for d in done[n])
            continue
        history = [h["event"] for h in app.get_job(f"job-{n}").history]
        assert "released" in history, f"job {n} was not released: {history}"
        assert lines[-1].pid in new_pids and lines[-1].t >= term_at
        released[n] = lines[-1].t - term_at
    assert released, "no job was in flight past the grace period"
    assert set(released) <= long_jobs  # short jobs (<= 20 ms) all finished in the grace period
    assert max(released.values()) < GRACE + 10, released

    def explained(job_id: str, line: Line) -> bool:
        return line.pid in old_pids and int(job_id.split("-")[1]) in released

    report = check("R5 graceful drain", app, producer, ledger, [], began, explained=explained)
    report.extra.update(
        released=len(released),
        finished_during_drain=finished_in_drain,
        old_exit_s=round(exit_s, 2),
        max_pickup_s=round(max(released.values()), 2),
    )
    report.publish()
    assert report.lost == [], f"lost: {report.lost[:20]}"
    assert report.unexplained == [], f"unexplained duplicates: {report.unexplained[:20]}"
    assert len(report.duplicates) == len(released)
    new.signal(signal.SIGTERM)
    assert new.wait(30) == 0, new.output()[-3000:]
    app.close()
