"""R-W1 (issue 16): a 1,000-job chord while a worker process is killed with SIGKILL every
second, on Redis and on a SQLite file.

Pass: every member ran (the ledger has a ``done`` line for each of the 1,000), the callback ran
exactly once (one ``callback`` line in the ledger, one attempt) with the 1,000 results in order,
and nothing is left waiting. The kills stop once every member finished, so the callback itself
is never killed (a killed callback runs again: at-least-once, as any job).
"""

from __future__ import annotations

import random
import time

import pytest

from conveyor import JobState, chord
from tests.reliability.conftest import StartWorkers
from tests.reliability.harness import Kill, Ledger, checker_app, kill_worker, wait_until

pytestmark = pytest.mark.slow
MEMBERS = 1000


@pytest.mark.timeout(300)
def test_chord_callback_once_under_worker_kills(
    shared_url: str, ledger: Ledger, start_workers: StartWorkers
) -> None:
    app = checker_app(shared_url)

    @app.task(name="part")  # the same names as tests/reliability/ledger_app.py: signatures only
    def part(n: int, seconds: float) -> int:
        return n

    @app.task(name="gather")
    def gather(results: list[int]) -> int:
        return len(results)

    workers = start_workers(
        shared_url, "-p", "3", "-c", "4", "--visibility-timeout", "2.3", "--shutdown-timeout", "5"
    )
    workers.wait_ready(3)
    flow = chord([part.partial(n, 0.02) for n in range(MEMBERS)], gather.partial()).enqueue(
        name="r-w1"
    )
    rng = random.Random(3)
    kills: list[Kill] = []
    deadline = time.monotonic() + 180
    while len(ledger.done()) < MEMBERS and time.monotonic() < deadline:
        time.sleep(1.0)
        waiting = app.get_job(flow.sinks[0]).state is JobState.WAITING
        if waiting and len(ledger.done()) < MEMBERS:
            kills.append(kill_worker(app, workers.pick_victim(rng)))
    callback_id = flow.sinks[0]

    def finished() -> bool:
        job = app.get_job(callback_id)
        return job.state is JobState.COMPLETED

    wait_until(finished, 120, "the chord callback to complete")
    callback = app.get_job(callback_id)
    runs = [line for line in ledger.read() if line.event == "callback"]
    print(f"\nR-W1 chord kills ({shared_url.split(':', 1)[0]}): {len(kills)} kills")
    assert len(kills) >= 2, "the chord finished before the nemesis got going"
    assert sorted(ledger.done()) == list(range(MEMBERS)), "a member never finished"
    assert len(runs) == 1 and runs[0].n == MEMBERS, runs
    assert callback.attempts == 1 and callback.args == [list(range(MEMBERS))]
    assert callback.result == MEMBERS
    assert flow.status()["waiting"] == 0 and flow.status()["completed"] == MEMBERS + 1
