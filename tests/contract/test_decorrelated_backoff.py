"""Contract: AWS decorrelated jitter grows each retry delay from the job's previous delay."""

from __future__ import annotations

import random

from conveyor import Backoff, Conveyor, FakeClock
from conveyor.broker.base import Broker


def test_each_delay_grows_from_the_previous_delay_of_this_job(
    broker: Broker, clock: FakeClock
) -> None:
    base, cap = 1.0, 500.0
    app = Conveyor(broker, clock=clock, rng=random.Random(5))

    @app.task(max_attempts=8, backoff=Backoff.decorrelated(base=base, max=cap))
    def flaky() -> None:
        raise ValueError("down")

    job = flaky.enqueue()
    worker = app.worker()
    delays: list[float] = []
    for _ in range(7):
        failed_at = clock.now()
        assert worker.process_next()
        job.refresh()
        delays.append(job.run_at - failed_at)
        clock.set(job.run_at)
    previous = base
    for delay in delays:
        assert base - 1e-6 <= delay <= min(cap, 3 * previous) + 1e-6, (delays, previous)
        previous = delay
    assert delays[0] != base  # the first delay is drawn too (uniform(base, 3 * base))
    assert max(delays) > 3 * base  # it grows past what a chain restarted at base allows
