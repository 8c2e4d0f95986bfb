"""Issue 18: an active job's run entry (``<p>:{q}:run``, keys.py) instead of lease fields in its
hash, and fresh ready members (``<seq>.<id>``) the claim leases without reading the hash.

* while a job is active its run entry exists and readers show its lease (attempts, started_at,
  lease_expires_at, worker_id, token); every way out of active deletes it;
* fencing: an ack, failure, release or extension with a stale token is refused;
* a job leased by the previous version (lease fields in its hash, no run entry) still
  completes, fails, releases, extends and expires;
* garbage behind a fresh member still dead-letters as decode_error, and a vanished job's member
  is dropped.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from conveyor.broker.records import Ack
from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.keys import RUN
from conveyor.core.job import Job
from conveyor.core.state import JobState
from conveyor.errors import LeaseLost

from .conftest import T0
from .oldlease import make_old_lease

ERROR = {"type": "ValueError", "message": "boom", "traceback": "", "kind": "error"}


def _job(job_id: str, **kw: Any) -> Job:
    return Job(id=job_id, task="mod.work", queue="default", created_at=T0, run_at=T0, **kw)


def _run(rbroker: RedisBroker, job_id: str) -> bytes | None:
    raw: bytes | None = rbroker.client.hget(rbroker.keys.queue_key("default", RUN), job_id)
    return raw


def _claim(rbroker: RedisBroker, *ids: str, worker: str = "w-1") -> dict[str, str]:
    rbroker.enqueue([_job(i) for i in ids], T0)
    leases = rbroker.claim(["default"], T0, limit=len(ids), visibility_timeout=30, worker_id=worker)
    assert sorted(lease.job.id for lease in leases) == sorted(ids)
    for lease in leases:
        assert _run(rbroker, lease.job.id) is not None  # the lease lives in the run entry
    return {lease.job.id: lease.token for lease in leases}


def _events(rbroker: RedisBroker, kind: str) -> list[dict[str, Any]]:
    events, _ = rbroker.events_read(None, 1000)
    return [e for e in events if e.get("type") == kind]


def test_an_active_job_reads_back_with_its_lease_and_only_its_state_in_the_hash(
    rbroker: RedisBroker,
) -> None:
    tokens = _claim(rbroker, "a")
    fields = rbroker.client.hgetall(rbroker.keys.job("default", "a"))
    assert fields[b"state"] == b"active"
    assert b"token" not in fields and b"lease_expires_at" not in fields  # one write per claim
    job = rbroker.get("a")
    assert job is not None and job.state is JobState.ACTIVE
    assert (job.attempts, job.started_at, job.lease_expires_at) == (1, T0, T0 + 30)
    assert job.worker_id == "w-1"
    started = _events(rbroker, "started")
    assert [(e["job_id"], e["task"], e["attempt"]) for e in started] == [("a", "mod.work", 1)]
    assert rbroker.complete([Ack("a", tokens["a"])], T0 + 1) == [True]
    done = rbroker.get("a")
    assert done is not None and done.state is JobState.COMPLETED
    assert (done.attempts, done.started_at, done.worker_id) == (1, T0, "w-1")
    completed = _events(rbroker, "completed")
    assert [(e["job_id"], e["task"], e["attempt"]) for e in completed] == [("a", "mod.work", 1)]


def test_enqueued_jobs_get_fresh_ready_members(rbroker: RedisBroker) -> None:
    rbroker.enqueue([_job("a")], T0)
    rbroker.enqueue([_job("b"), _job("c", expires_at=T0 + 100)], T0)
    members = rbroker.client.zrange(rbroker.keys.queue_key("default", "ready"), 0, -1)
    marks = {m[17:].decode(): m[16:17] for m in members}
    assert marks == {"a": b".", "b": b".", "c": b":"}  # an expires_at is read at claim
    assert [job.id for job in rbroker.peek("default", 10)] == ["a", "b", "c"]


def test_a_stale_token_is_refused_on_every_exit(rbroker: RedisBroker) -> None:
    tokens = _claim(rbroker, "a")
    stale = "999:default"
    assert rbroker.complete([Ack("a", stale)], T0 + 1) == [False]
    assert rbroker.extend([("a", stale)], T0 + 1, 30) == [False]
    with pytest.raises(LeaseLost):
        rbroker.fail("a", stale, T0 + 1, error=ERROR, retry_at=None)
    with pytest.raises(LeaseLost):
        rbroker.release("a", stale, T0 + 1)
    with pytest.raises(LeaseLost):
        rbroker.cancel_running("a", stale, T0 + 1)
    assert _run(rbroker, "a") is not None
    job = rbroker.get("a")
    assert job is not None and job.state is JobState.ACTIVE
    assert rbroker.complete([Ack("a", tokens["a"])], T0 + 2) == [True]
    assert rbroker.complete([Ack("a", tokens["a"])], T0 + 3) == [False]  # a late duplicate


def test_the_run_entry_goes_on_every_way_out_of_active(rbroker: RedisBroker) -> None:
    tokens = _claim(rbroker, "done", "failed", "retried", "released", "cancelled", "lost")
    assert rbroker.complete([Ack("done", tokens["done"])], T0 + 1) == [True]
    assert rbroker.fail("failed", tokens["failed"], T0 + 1, error=ERROR, retry_at=None) == (
        JobState.DEAD_LETTER
    )
    assert rbroker.fail("retried", tokens["retried"], T0 + 1, error=ERROR, retry_at=T0 + 5) == (
        JobState.RETRY_SCHEDULED
    )
    assert rbroker.release("released", tokens["released"], T0 + 1) is JobState.PENDING
    assert rbroker.cancel_running("cancelled", tokens["cancelled"], T0 + 1) is JobState.CANCELLED
    assert rbroker.reap_expired(T0 + 31) == 1  # "lost": its deadline T0 + 30 passed
    assert rbroker.client.hlen(rbroker.keys.queue_key("default", RUN)) == 0
    assert rbroker.client.zcard(rbroker.keys.queue_key("default", "leases")) == 0
    states = {}
    for job_id in tokens:
        job = rbroker.get(job_id)
        assert job is not None
        states[job_id] = job.state
        assert job.attempts == 1 and job.lease_expires_at is None, job_id
    assert states == {
        "done": JobState.COMPLETED,
        "failed": JobState.DEAD_LETTER,
        "retried": JobState.RETRY_SCHEDULED,
        "released": JobState.PENDING,
        "cancelled": JobState.CANCELLED,
        "lost": JobState.PENDING,
    }
    lost = rbroker.get("lost")
    assert lost is not None and lost.lost == 1 and lost.worker_id is None
    assert rbroker.purge(T0 + 2, state=JobState.COMPLETED) == 1
    assert rbroker.get("done") is None


def test_a_retried_job_runs_again_with_its_count_and_history(rbroker: RedisBroker) -> None:
    tokens = _claim(rbroker, "a")
    rbroker.fail("a", tokens["a"], T0 + 1, error=ERROR, retry_at=T0 + 2)
    [lease] = rbroker.claim(["default"], T0 + 3, visibility_timeout=30, worker_id="w-2")
    assert lease.job.attempts == 2 and lease.job.errors[-1]["message"] == "boom"
    job = rbroker.get("a")
    assert job is not None and (job.attempts, job.worker_id, job.started_at) == (2, "w-2", T0 + 3)
    assert rbroker.complete([Ack("a", lease.token)], T0 + 4) == [True]
    done = rbroker.get("a")
    assert done is not None and (done.attempts, done.worker_id, done.started_at) == (
        2,
        "w-2",
        T0 + 3,
    )
    assert [e["attempt"] for e in _events(rbroker, "completed")] == [2]


def test_a_requeued_job_counts_from_zero_again(rbroker: RedisBroker) -> None:
    tokens = _claim(rbroker, "a")
    rbroker.fail("a", tokens["a"], T0 + 1, error=ERROR, retry_at=None)
    assert rbroker.requeue("a", T0 + 2)
    assert rbroker.get("a").attempts == 0  # type: ignore[union-attr]
    [lease] = rbroker.claim(["default"], T0 + 3, visibility_timeout=30, worker_id="w-2")
    assert lease.job.attempts == 1
    assert rbroker.complete([Ack("a", lease.token)], T0 + 4) == [True]
    assert rbroker.get("a").attempts == 1  # type: ignore[union-attr]


def test_extend_moves_the_deadline_in_the_run_entry(rbroker: RedisBroker) -> None:
    tokens = _claim(rbroker, "a")
    assert rbroker.extend([("a", tokens["a"])], T0 + 20, 30) == [True]
    assert rbroker.get("a").lease_expires_at == T0 + 50  # type: ignore[union-attr]
    assert rbroker.reap_expired(T0 + 31) == 0
    assert rbroker.reap_expired(T0 + 51) == 1


def test_an_active_job_cannot_be_deleted_and_keeps_its_run_entry(rbroker: RedisBroker) -> None:
    _claim(rbroker, "a")
    assert rbroker.delete_job("a", T0 + 1) is False
    assert rbroker.clear_queue("default", T0 + 1) == 0
    assert _run(rbroker, "a") is not None


@pytest.mark.parametrize("exit_", ["complete", "fail", "release", "extend", "expire", "cancel"])
def test_a_job_leased_by_the_previous_version_still_leaves_active(
    rbroker: RedisBroker, exit_: str
) -> None:
    tokens = _claim(rbroker, "a")
    make_old_lease(rbroker, "a")  # lease fields in the hash, no run entry
    token = tokens["a"]
    job = rbroker.get("a")
    assert job is not None and job.lease_expires_at == T0 + 30 and job.worker_id == "w-1"
    if exit_ == "complete":
        assert rbroker.complete([Ack("a", "1:default"), Ack("a", token)], T0 + 1) == [False, True]
        want = JobState.COMPLETED
        assert [e["task"] for e in _events(rbroker, "completed")] == ["mod.work"]
    elif exit_ == "fail":
        want = rbroker.fail("a", token, T0 + 1, error=ERROR, retry_at=None)
    elif exit_ == "release":
        want = rbroker.release("a", token, T0 + 1)
    elif exit_ == "cancel":
        want = rbroker.cancel_running("a", token, T0 + 1)
    elif exit_ == "extend":
        assert rbroker.extend([("a", token)], T0 + 20, 30) == [True]
        assert rbroker.reap_expired(T0 + 31) == 0
        assert rbroker.get("a").lease_expires_at == T0 + 50  # type: ignore[union-attr]
        assert rbroker.complete([Ack("a", token)], T0 + 40) == [True]
        want = JobState.COMPLETED
    else:
        assert rbroker.reap_expired(T0 + 31) == 1
        want = JobState.PENDING
    job = rbroker.get("a")
    assert job is not None and job.state is want and job.attempts == 1
    assert rbroker.client.zcard(rbroker.keys.queue_key("default", "leases")) == 0
    assert _run(rbroker, "a") is None


def test_garbage_behind_a_fresh_member_still_dead_letters(rbroker: RedisBroker) -> None:
    client, ready = rbroker.client, rbroker.keys.queue_key("default", "ready")
    client.set(rbroker.keys.job("default", "wrong"), b"a plain string, not a hash")
    client.hset(rbroker.keys.queue_key("default", "payloads"), "bad", b"{this is not json")
    client.hset(rbroker.keys.job("default", "bad"), mapping={"state": "pending"})
    client.zadd(ready, {f"{1:016x}.wrong": 0, f"{2:016x}.bad": 0, f"{3:016x}.vanished": 0})
    rbroker.enqueue([_job("good")], T0)
    [lease] = rbroker.claim(["default"], T0, limit=10, worker_id="w-1")
    assert lease.job.id == "good"
    for job_id in ("wrong", "bad"):
        job = rbroker.get(job_id)
        assert job is not None and job.state is JobState.DEAD_LETTER, job_id
        assert job.errors[-1]["kind"] == "decode_error", job_id
    assert client.exists(rbroker.keys.job("default", "vanished")) == 0  # nothing created
    assert client.zcard(ready) == 0
    assert client.hlen(rbroker.keys.queue_key("default", RUN)) == 1  # only "good" is active


def test_an_envelope_of_another_shape_still_names_the_task(rbroker: RedisBroker) -> None:
    """A fresh member whose envelope does not begin with v, id, task (another producer)."""
    client = rbroker.client
    rbroker.register(["default"])  # a known queue: events_read reads its stream
    envelope = {"task": "other.task", "id": "x", "v": 1, "queue": "default", "state": "pending"}
    client.hset(rbroker.keys.queue_key("default", "payloads"), "x", orjson.dumps(envelope))
    client.hset(rbroker.keys.job("default", "x"), mapping={"state": "pending"})
    client.zadd(rbroker.keys.queue_key("default", "ready"), {f"{1:016x}.x": 0})
    [lease] = rbroker.claim(["default"], T0, worker_id="w-1")
    assert rbroker.complete([Ack("x", lease.token)], T0 + 1) == [True]
    assert [e["task"] for e in _events(rbroker, "started")] == ["other.task"]
    assert [e["task"] for e in _events(rbroker, "completed")] == ["other.task"]


@pytest.mark.parametrize(
    ("job_id", "task", "worker"),
    [
        ('quote"and\\slash|bar', "mod.work", "w-1"),
        ("plain", 'task|with"quote\\', "host|1\nsecond line"),
        ("ünïcödé/slash", "t\x01ctl", ""),
    ],
)
def test_ids_tasks_and_workers_that_need_escaping_round_trip(
    rbroker: RedisBroker, job_id: str, task: str, worker: str
) -> None:
    """The run entry packs the event row as JSON text and the worker id last: neither may be
    confused by a separator, a quote or a control character in them."""
    rbroker.enqueue([Job(id=job_id, task=task, queue="default", created_at=T0, run_at=T0)], T0)
    [lease] = rbroker.claim(["default"], T0, visibility_timeout=30, worker_id=worker)
    job = rbroker.get(job_id)
    assert job is not None and job.task == task and job.worker_id == (worker or None)
    assert job.lease_expires_at == T0 + 30 and job.attempts == 1
    assert rbroker.extend([(job_id, lease.token)], T0 + 1, 30) == [True]
    assert rbroker.complete([Ack(job_id, lease.token)], T0 + 2) == [True]
    done = rbroker.get(job_id)
    assert done is not None and done.state is JobState.COMPLETED
    assert (done.attempts, done.worker_id, done.started_at) == (1, worker or None, T0)
    rows = [(e["job_id"], e["task"], e["attempt"]) for e in _events(rbroker, "completed")]
    assert rows == [(job_id, task, 1)]
    assert [(e["job_id"], e["task"]) for e in _events(rbroker, "started")] == [(job_id, task)]
