"""Issue 18: after a short claim (fewer jobs than free slots) the worker waits for work at once.

A claim that comes back short has read every queue it serves to the end, so claiming again
right away almost always finds nothing: one wasted call per idle cycle, one per shard on a
sharded queue. The broker says so (``Claimed.drained``, with ``next_due`` as for an empty
claim) and the worker goes straight to ``wait_for_work``: a trickle of jobs costs one claim per
job, and a delayed job still starts at its due time, not a poll interval later.

Real backends, real clock; the poll interval is long (5 s) so a timeout never stands in for a
wake-up, and the bounds are generous (a loaded 2-core machine delays single samples).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from conveyor import Conveyor
from conveyor.broker.base import Broker
from conveyor.config import Settings

from .conftest import running, wait_until

POLL = 5.0  # a worker that missed a wake-up or a due time would show gaps of seconds
TRICKLE = 20


def _app(broker: Broker, backend: str) -> Conveyor:
    settings = Settings(poll_interval=POLL, reap_interval=2.0, shutdown_timeout=5.0)  # type: ignore[call-arg]
    return Conveyor(broker, settings=settings, rng=random.Random(5))


def _count_claims(broker: Broker) -> list[int]:
    """Wrap the real broker's ``claim`` to record how many leases each call returned."""
    sizes: list[int] = []
    real_claim = broker.claim

    def counting_claim(*args: Any, **kwargs: Any) -> Any:
        got = real_claim(*args, **kwargs)
        sizes.append(len(got))
        return got

    broker.claim = counting_claim  # type: ignore[method-assign]
    return sizes


def test_a_trickle_of_jobs_costs_one_claim_per_job(broker: Broker, backend: str) -> None:
    app = _app(broker, backend)
    done: list[int] = []

    @app.task(name="short.note")
    def note(i: int) -> None:
        done.append(i)

    sizes = _count_claims(broker)
    with running(app, concurrency=4):
        wait_until(lambda: sizes, timeout=20)  # the first (empty) claim: the worker is idle
        before = len(sizes)
        started = time.monotonic()
        for i in range(TRICKLE):
            note.enqueue(i)
            wait_until(lambda i=i: len(done) > i, timeout=20)  # type: ignore[misc]
        took = time.monotonic() - started
        claims = len(sizes) - before
    assert done == list(range(TRICKLE))
    assert took < TRICKLE * 1.0, "every job was picked up on a wake-up, not after a poll"
    # before: each job's claim (1 of 4 slots) was followed at once by an empty one (2 per job)
    assert claims <= TRICKLE + 3, (claims, sizes[before:])


def test_a_delayed_job_starts_on_time_after_a_short_claim(broker: Broker, backend: str) -> None:
    """The short claim reports ``next_due``: the wait that follows it ends at the delayed job's
    due time (before, the empty claim that followed reported it)."""
    app = _app(broker, backend)
    starts: dict[str, float] = {}
    lock = threading.Lock()

    @app.task(name="short.mark")
    def mark(name: str) -> None:
        with lock:
            starts[name] = time.monotonic()

    with running(app, concurrency=4):
        time.sleep(0.2)  # the worker is idle, waiting
        began = time.monotonic()
        mark.enqueue_in(0.6, "later")
        mark.enqueue("now")  # claimed alone: a short claim, then the wait
        wait_until(lambda: len(starts) == 2, timeout=20)
    assert starts["now"] - began < 0.5
    late = starts["later"] - (began + 0.6)
    assert -0.05 < late < 0.5, f"the delayed job started {late:.3f}s after its due time"
