"""enqueue.lua's short and full job records, mixed in one multi-queue batch.

Jobs that share their group's defaults travel as (id, payload, ""), the others in full; the
reply lists only the jobs whose idempotency key matched, by batch position. These checks pin
the mapping back to the caller's order and that every job is stored as sent.
"""

from __future__ import annotations

import redis
from conveyor.broker.redis import RedisBroker
from conveyor.core.job import Job
from conveyor.core.state import JobState

from .conftest import T0


def test_mixed_records_and_duplicates_map_back_in_order(rbroker: RedisBroker) -> None:
    b = rbroker
    first = b.enqueue(
        [Job(id="k-owner", task="t", queue="b", run_at=T0, created_at=T0, idempotency_key="k1")], T0
    )
    assert first[0].duplicate is False
    jobs = [
        Job(id="a1", task="t", queue="a", run_at=T0, created_at=T0),
        Job(id="b1", task="t", queue="b", run_at=T0, created_at=T0, idempotency_key="k1"),
        Job(id="a2", task="u", queue="a", run_at=T0, created_at=T0, priority=5),
        Job(id="b2", task="t", queue="b", run_at=T0 + 60, created_at=T0, state=JobState.SCHEDULED),
        Job(id="a3", task="t", queue="a", run_at=T0, created_at=T0),
        Job(id="b3", task="t", queue="b", run_at=T0, created_at=T0, idempotency_key="k2"),
        Job(id="b4", task="t", queue="b", run_at=T0, created_at=T0, idempotency_key="k2"),
    ]
    res = b.enqueue(jobs, T0)
    assert [(r.id, r.duplicate, r.state) for r in res] == [
        ("a1", False, JobState.PENDING),
        ("k-owner", True, JobState.PENDING),
        ("a2", False, JobState.PENDING),
        ("b2", False, JobState.SCHEDULED),
        ("a3", False, JobState.PENDING),
        ("b3", False, JobState.PENDING),
        ("b3", True, JobState.PENDING),
    ]
    for job_id, task, prio, state in [
        ("a1", "t", 0, "pending"),
        ("a2", "u", 5, "pending"),
        ("b2", "t", 0, "scheduled"),
        ("a3", "t", 0, "pending"),
    ]:
        got = b.get(job_id)
        assert got is not None and (got.task, got.priority, str(got.state)) == (task, prio, state)
    assert b.get("b1") is None and b.get("b4") is None
    client = redis.Redis.from_url(b.url)
    assert client.hget("conveyor:{a}:job:a2", "priority") == b"5"
    assert client.hget("conveyor:{b}:job:b2", "run_at") == repr(T0 + 60).encode()
    # FIFO within a priority: a1 before a3; a2 (priority 5) last
    assert [j.id for j in b.peek("a", 10)] == ["a1", "a3", "a2"]
