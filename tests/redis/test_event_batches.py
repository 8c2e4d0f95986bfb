"""Batch stream entries (one XADD per enqueue / claim / complete call) and stale wake markers."""

from __future__ import annotations

from typing import Any

import redis
from conveyor.broker.base import Ack
from conveyor.broker.redis import RedisBroker
from conveyor.core.job import Job

from .conftest import T0, small_retention


def _jobs(n: int, prefix: str = "j") -> list[Job]:
    return [Job(id=f"{prefix}{i}", task="t", run_at=T0, created_at=T0) for i in range(n)]


def _all_events(broker: RedisBroker, step: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    cursor = None
    while True:
        events, cursor = broker.events_read(cursor, step)
        if not events:
            return out
        assert len(events) <= step
        out += [(e["type"], e["job_id"], e.get("attempt"), e.get("worker")) for e in events]


def test_one_entry_per_call_and_every_event_readable(rbroker: RedisBroker) -> None:
    b = rbroker
    b.enqueue(_jobs(5), T0)
    leases = b.claim(["default"], T0, limit=5, worker_id="w1")
    assert b.complete([Ack(x.id, x.token) for x in leases], T0) == [True] * 5
    client = redis.Redis.from_url(b.url)
    assert client.xlen("conveyor:{default}:events") == 3  # enqueued, started, completed
    expected = [("enqueued", f"j{i}", None, None) for i in range(5)]
    expected += [("started", f"j{i}", 1, "w1") for i in range(5)]
    expected += [("completed", f"j{i}", 1, None) for i in range(5)]
    for step in (1, 2, 3, 4, 7, 100):  # a read may stop inside an entry and resume there
        assert _all_events(b, step) == expected, step
    events, _ = b.events_read(None, 100)
    first = events[0]
    assert first["queue"] == "default" and first["task"] == "t" and first["at"] == T0
    assert first["state"] == "pending"


def test_single_job_entries_keep_the_flat_format(rbroker: RedisBroker) -> None:
    rbroker.enqueue(_jobs(1), T0)
    client = redis.Redis.from_url(rbroker.url)
    ((_, fields),) = client.xrange("conveyor:{default}:events")
    assert fields[b"type"] == b"enqueued" and fields[b"job_id"] == b"j0"
    assert b"jobs" not in fields


def test_cursor_resumes_across_queues_and_new_entries(rbroker: RedisBroker) -> None:
    b = rbroker
    b.enqueue(_jobs(3, "a"), T0)
    events, cursor = b.events_read(None, 2)
    assert [e["job_id"] for e in events] == ["a0", "a1"]
    b.enqueue(
        [Job(id=f"m{i}", task="t", queue="mail", run_at=T0, created_at=T0) for i in range(2)], T0
    )
    events, cursor = b.events_read(cursor, 10)
    assert [e["job_id"] for e in events] == ["a2", "m0", "m1"]
    assert b.events_read(cursor, 10) == ([], cursor)


def test_batch_entries_count_their_events_against_the_cap(redis_server: Any) -> None:
    broker = RedisBroker.from_url(redis_server.url, small_retention(events_max=200))
    broker.flush_all()
    for round_ in range(40):
        broker.enqueue(_jobs(50, f"r{round_}-"), T0)
    client = redis.Redis.from_url(broker.url)
    entries = client.xlen("conveyor:{default}:events")
    assert entries * 50 <= 200 + 50 * 8, entries  # ~events_max events (MAXLEN ~ is approximate)
    broker.close()


def test_a_stale_wake_marker_ends_one_wait_and_the_claim_drops_the_rest(
    rbroker: RedisBroker,
) -> None:
    import time

    client = redis.Redis.from_url(rbroker.url)
    for _ in range(3):  # left by jobs another worker already took
        client.lpush("conveyor:{default}:wake", "1")
    rbroker.wait_for_work(["default"], 5.0)  # returns at once: the caller's claim decides
    assert rbroker.claim(["default"], T0, limit=10) == []
    assert client.llen("conveyor:{default}:wake") == 0  # the claim dropped the stale markers
    began = time.monotonic()
    rbroker.wait_for_work(["default"], 0.3)  # so the next wait blocks
    assert time.monotonic() - began >= 0.25
    rbroker.enqueue(_jobs(1), T0)  # a real wake-up returns at once
    began = time.monotonic()
    rbroker.wait_for_work(["default"], 30.0)
    assert time.monotonic() - began < 5.0  # not its 30 s timeout (slack for a loaded machine)
