"""Contract: ``clear_queue`` and ``purge`` release the idempotency keys of the jobs they delete,
as ``delete_job`` does, fenced: a key that moved on to another job stays with that job."""

from __future__ import annotations

from conveyor import Conveyor, FakeClock, JobState
from conveyor.broker.base import Broker


def dead_job(app: Conveyor, key: str, ttl: float = 600) -> str:
    """A dead-lettered job holding idempotency key ``key``."""

    @app.task(name="doomed", max_attempts=1)
    def doomed() -> None:
        raise RuntimeError("no")

    job = app.runtime.enqueue("doomed", idempotency_key=key, idempotency_ttl=ttl)
    app.worker().run_until_idle()
    assert job.refresh().state is JobState.DEAD_LETTER
    return job.id


def test_clear_releases_the_keys_of_the_cleared_jobs(app: Conveyor, broker: Broker) -> None:
    """Each waiting state (pending, scheduled) loses its key with its job."""
    now = app.runtime.enqueue("t", idempotency_key="k-now")
    later = app.runtime.enqueue("t", idempotency_key="k-later", delay=3600)
    assert broker.clear_queue("default", app.clock.now()) == 2
    for key, old in (("k-now", now.id), ("k-later", later.id)):
        again = app.runtime.enqueue("t", idempotency_key=key)
        assert not again.duplicate and again.id != old, key
        assert broker.get(again.id) is not None


def test_clear_leaves_a_key_that_moved_to_a_running_job(
    app: Conveyor, broker: Broker, clock: FakeClock
) -> None:
    old = app.runtime.enqueue("t", idempotency_key="k", idempotency_ttl=10, delay=3600)
    clock.advance(11)
    new = app.runtime.enqueue("t", idempotency_key="k", idempotency_ttl=600)
    assert not new.duplicate
    leases = broker.claim(["default"], clock.now(), limit=5)
    assert [lease.id for lease in leases] == [new.id]
    assert broker.clear_queue("default", clock.now()) == 1
    assert broker.get(old.id) is None
    dup = app.runtime.enqueue("t", idempotency_key="k", idempotency_ttl=600)
    assert dup.duplicate and dup.id == new.id, "the running job keeps its key"


def test_purge_releases_the_keys_of_the_purged_jobs(app: Conveyor, broker: Broker) -> None:
    gone = dead_job(app, "order-1")
    assert app.runtime.enqueue("doomed", idempotency_key="order-1").duplicate
    assert broker.purge(app.clock.now()) == 1
    again = app.runtime.enqueue("doomed", idempotency_key="order-1")
    assert not again.duplicate and again.id != gone


def test_purge_by_ids_releases_only_those_keys(app: Conveyor, broker: Broker) -> None:
    first = dead_job(app, "a")
    dead_job(app, "b")
    assert broker.purge(app.clock.now(), ids=[first]) == 1
    assert not app.runtime.enqueue("doomed", idempotency_key="a").duplicate
    assert app.runtime.enqueue("doomed", idempotency_key="b").duplicate


def test_purge_leaves_a_key_that_moved_to_another_job(
    app: Conveyor, broker: Broker, clock: FakeClock
) -> None:
    dead_job(app, "k", ttl=10)
    clock.advance(11)
    new = app.runtime.enqueue("doomed", idempotency_key="k", idempotency_ttl=600, delay=3600)
    assert not new.duplicate
    assert broker.purge(clock.now()) == 1
    dup = app.runtime.enqueue("doomed", idempotency_key="k", idempotency_ttl=600)
    assert dup.duplicate and dup.id == new.id


def test_clear_releases_a_hostile_key(app: Conveyor, broker: Broker) -> None:
    """Quotes, backslashes, braces, a bar and non-ASCII text in the key: still freed."""
    key = 'a"b\\c {q}|é😀 "idempotency_key":"x'
    app.runtime.enqueue("t", idempotency_key=key)
    assert broker.clear_queue("default", app.clock.now()) == 1
    assert not app.runtime.enqueue("t", idempotency_key=key).duplicate


def test_clear_releases_the_key_of_a_job_waiting_in_a_flow_group(
    app: Conveyor, broker: Broker
) -> None:
    @app.task(name="fair", fair_by="tenant")
    def fair(tenant: str) -> None: ...

    job = fair.options(idempotency_key="g-1").enqueue("acme")
    assert broker.clear_queue("default", app.clock.now()) == 1
    again = fair.options(idempotency_key="g-1").enqueue("acme")
    assert not again.duplicate and again.id != job.id
