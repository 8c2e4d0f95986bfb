"""A worker given ``queues=["events"]`` in a process that does not declare ``events`` sharded
serves the stored shards too (item 6 of session 10's hardening), as ``app.dequeue`` and the
operator's actions do (``admin.queue_members``); the list is refreshed every
``SHARD_REFRESH`` seconds, so shards that appear after the worker started are served as well.

It used to claim only the unsharded name: the jobs of every shard waited for ever.
"""

from __future__ import annotations

from conveyor import Conveyor, FakeClock, JobState
from conveyor.worker.shard_discovery import SHARD_REFRESH


def _producer(app: Conveyor, shards: int = 4) -> Conveyor:
    """The process that declares ``events`` sharded, on the same store and clock."""
    producer = Conveyor(app.broker, clock=app.runtime.clock)
    producer.queue("events", shards=shards)
    return producer


def test_a_worker_that_does_not_declare_the_shards_drains_them(app: Conveyor) -> None:
    done: list[int] = []

    @app.task(queue="events")
    def record(i: int) -> None:
        done.append(i)

    producer = _producer(app)
    old = app.enqueue("record", [100], queue="events")  # the unsharded name, stored here
    jobs = [producer.enqueue("record", [i], queue="events") for i in range(8)]
    assert len({j.queue for j in jobs}) == 4
    worker = app.worker(["events"])
    assert worker.run_until_idle() == 9
    assert sorted(done) == [*range(8), 100]
    assert all(app.get_job(j.id).state is JobState.COMPLETED for j in [*jobs, old])
    assert "events" in worker.queues and len(worker.queues) == 5


def test_shards_stored_after_the_worker_started_are_found_on_refresh(
    app: Conveyor, clock: FakeClock
) -> None:
    done: list[int] = []

    @app.task(queue="events")
    def record(i: int) -> None:
        done.append(i)

    worker = app.worker(["events"])
    assert worker.run_until_idle() == 0
    producer = _producer(app, shards=3)
    for i in range(6):
        producer.enqueue("record", [i], queue="events")
    clock.advance(SHARD_REFRESH + 0.1)
    assert worker.run_until_idle() == 6
    assert sorted(done) == list(range(6))


def test_a_declaring_worker_also_serves_shards_of_another_count(app: Conveyor) -> None:
    """Re-sharded from 2 to 4: the jobs left in the 2-shard layout still run."""

    @app.task(queue="events")
    def record(i: int) -> None:
        pass

    old = _producer(app, shards=2)
    left = [old.enqueue("record", [i], queue="events") for i in range(4)]
    app.queue("events", shards=4)
    new = [app.enqueue("record", [i], queue="events") for i in range(4)]
    assert app.worker(["events"]).run_until_idle() == 8
    assert all(app.get_job(j.id).state is JobState.COMPLETED for j in [*left, *new])
