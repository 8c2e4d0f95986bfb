"""Issue 18: the per-job scripts do less server work, with the same stored results.

* The leases set scores a lease with its deadline rounded UP to a whole second (an integer a
  small sorted set keeps unparsed); reaping and ``next_due`` still use the exact deadline from
  the job hash, and a lease written by the previous version (its exact, fractional deadline as
  the score) is reaped exactly as before.
* A one-job enqueue (enqueue_one.lua: one key, eight arguments) stores exactly what a batch
  (enqueue.lua) stores, and only under keys.py's names.
* A claim on a queue without flow groups asks about groups once (one EXISTS), not again after
  leasing.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from importlib import resources
from typing import Any

import pytest

from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.keys import QUEUE_KEY_SUFFIXES
from conveyor.core.job import Job
from conveyor.core.state import JobState
from conveyor.errors import DuplicateJob

from .oldlease import make_old_lease

T = 1_700_000_000.25  # a fractional clock: deadlines fall inside a second


def _job(job_id: str, **kw: Any) -> Job:
    values: dict[str, Any] = {"created_at": T, "run_at": T, **kw}
    return Job(id=job_id, task="t", queue="default", **values)


def _leases(rbroker: RedisBroker) -> Any:
    return rbroker.client.zrange(
        rbroker.keys.queue_key("default", "leases"), 0, -1, withscores=True
    )


def test_lease_scores_are_whole_seconds_rounded_up(rbroker: RedisBroker) -> None:
    rbroker.enqueue([_job("a")], T)
    [lease] = rbroker.claim(["default"], T, visibility_timeout=30)
    raw = rbroker.client.zscore(rbroker.keys.queue_key("default", "leases"), "a")
    assert raw == math.ceil(T + 30)  # 1_700_000_031, not 1_700_000_030.25
    assert rbroker.extend([("a", lease.token)], T + 5, 30) == [True]
    assert _leases(rbroker) == [(b"a", float(math.ceil(T + 35)))]
    assert rbroker.get("a").lease_expires_at == T + 35  # type: ignore[union-attr]


def test_a_lease_is_reaped_at_its_exact_deadline_not_the_rounded_score(
    rbroker: RedisBroker,
) -> None:
    rbroker.enqueue([_job("a")], T)
    rbroker.claim(["default"], T, visibility_timeout=30, worker_id="w1")
    deadline = T + 30  # score ceil(deadline) = deadline + 0.75
    assert rbroker.claim(["default"], deadline - 0.01, worker_id="w2") == []
    assert rbroker.get("a").state is JobState.ACTIVE  # type: ignore[union-attr]
    [again] = rbroker.claim(["default"], deadline + 0.01, worker_id="w2")
    assert again.job.id == "a" and again.job.lost == 1 and again.job.worker_id == "w2"


def test_old_fractional_lease_scores_still_reap_exactly(rbroker: RedisBroker) -> None:
    """A lease written by the previous version: its exact deadline as a fractional score."""
    rbroker.enqueue([_job("a"), _job("b")], T)
    rbroker.claim(["default"], T, limit=2, visibility_timeout=30, worker_id="w1")
    key = rbroker.keys.queue_key("default", "leases")
    for job_id, deadline in (("a", T + 30.5), ("b", T + 10.6)):  # the old shape, by hand:
        make_old_lease(rbroker, job_id)  # its lease fields in the hash, no run entry
        rbroker.client.zadd(key, {job_id: deadline})  # the exact deadline as the score
        rbroker.client.hset(rbroker.keys.job("default", job_id), "lease_expires_at", repr(deadline))
    assert rbroker.claim(["default"], T + 10.5, worker_id="w2") == []
    assert rbroker.claim(["default"], T + 10.5).next_due == T + 10.6
    [b] = rbroker.claim(["default"], T + 10.7, worker_id="w2")
    assert b.job.id == "b" and b.job.lost == 1
    assert rbroker.claim(["default"], T + 30.4, worker_id="w2") == []
    [a] = rbroker.claim(["default"], T + 30.6, worker_id="w2")
    assert a.job.id == "a" and a.job.lost == 1
    assert rbroker.reap_expired(T + 100) == 2  # both leases of w2 (deadline T + 60.x) lapse
    states = {j: rbroker.get(j).state for j in "ab"}  # type: ignore[union-attr]
    assert states == {"a": JobState.PENDING, "b": JobState.PENDING}


def test_next_due_is_the_exact_earliest_deadline_within_one_second(
    rbroker: RedisBroker,
) -> None:
    rbroker.enqueue([_job("a"), _job("b")], T)
    rbroker.claim(["default"], T + 0.6, limit=1, visibility_timeout=10)  # a: T + 10.6
    rbroker.claim(["default"], T + 0.3, limit=1, visibility_timeout=10)  # b: T + 10.3
    assert {s for _, s in _leases(rbroker)} == {float(math.ceil(T + 10.6))}  # one score
    assert rbroker.claim(["default"], T + 1).next_due == T + 10.3


def _stored(rbroker: RedisBroker, job_id: str) -> dict[str, Any]:
    fields = rbroker.client.hgetall(rbroker.keys.job("default", job_id))
    fields.pop(b"rk", None)  # the ready member: its sequence number differs
    payload = rbroker.client.hget(rbroker.keys.queue_key("default", "payloads"), job_id)
    return {"fields": fields, "payload": payload.replace(job_id.encode(), b"<id>")}


def test_one_job_enqueue_stores_what_a_batch_stores(rbroker: RedisBroker) -> None:
    for delay in (0.0, 60.0):  # pending (ready set) and scheduled
        rbroker.flush_all()
        state = JobState.PENDING if delay == 0 else JobState.SCHEDULED
        rbroker.enqueue([_job("solo", run_at=T + delay, state=state)], T)
        pair = [_job(f"pair{i}", run_at=T + delay, state=state) for i in (1, 2)]
        rbroker.enqueue(pair, T)
        assert _stored(rbroker, "solo") == _stored(rbroker, "pair1")
        assert rbroker.client.zcard(rbroker.keys.state_set("default", state)) == 3
        [event] = [e for e in rbroker.events.read()[0] if e.get("job_id") == "solo"]
        assert event["type"] == "enqueued" and event["task"] == "t"
        assert event["state"] == str(state)
        assert rbroker.client.llen(rbroker.keys.queue_key("default", "wake")) == 2
    rbroker.flush_all()
    rbroker.enqueue([_job("x")], T)
    with pytest.raises(DuplicateJob):
        rbroker.enqueue([_job("x")], T)
    assert [r.duplicate for r in rbroker.enqueue([_job("y", idempotency_key="k")], T)] == [False]
    assert rbroker.enqueue([_job("z", idempotency_key="k")], T)[0].id == "y"


def test_a_claim_without_flow_groups_asks_about_groups_once(rbroker: RedisBroker) -> None:
    rbroker.enqueue([_job("a")], T)
    rbroker.client.config_resetstat()
    assert len(rbroker.claim(["default"], T)) == 1
    stats = rbroker.client.info("commandstats")
    assert stats["cmdstat_exists"]["calls"] == 2  # paused, and the groups (one EXISTS)
    assert stats["cmdstat_zcard"]["calls"] == 1  # ready jobs left? (no f:groups ZCARD)


def test_enqueue_one_builds_only_keys_py_keys() -> None:
    text = resources.files("conveyor.broker.redis").joinpath("lua", "enqueue_one.lua").read_text()
    suffixes = set(re.findall(r"\bt \.\. '([^']+)'", text))
    assert suffixes == {"job:", "seq", "ready", "scheduled", "payloads", "wake", "events"}
    assert suffixes <= set(QUEUE_KEY_SUFFIXES)


def test_async_one_job_enqueue_takes_the_same_script(rbroker: RedisBroker) -> None:
    async def work() -> None:
        await rbroker.enqueue_async([_job("solo")], T)
        await rbroker.enqueue_async([_job("pair1"), _job("pair2")], T)
        with pytest.raises(DuplicateJob):
            await rbroker.enqueue_async([_job("solo")], T)

    asyncio.run(work())
    assert _stored(rbroker, "solo") == _stored(rbroker, "pair1")


def test_a_one_job_enqueue_sends_its_options_as_plain_arguments(rbroker: RedisBroker) -> None:
    # session 10: decoding a JSON options object cost ~5k server instructions of a one-job
    # enqueue's ~108k (bench/redis_instr.py); now, events_max and the fresh flag are ARGV
    script, _, _, args, _ = rbroker.enqueue_plan([_job("a")], T, None)
    assert script == "enqueue_one"
    options = [a for i, a in enumerate(args) if i != 2 and str(a).lstrip("b'").startswith("{")]
    assert options == []  # only the payload (ARGV[3]) is JSON


def test_a_one_job_enqueue_still_takes_the_documented_options_object(
    rbroker: RedisBroker,
) -> None:
    # docs/wire-format.md: other producers send {"now", "events_max"[, "fresh"]} in ARGV[1]
    rbroker.enqueue([_job("plain")], T)  # registers the queue; the gate turns on (fresh server)
    for job_id, fresh in (("obj", False), ("objf", True)):
        script, _, keys, args, _ = rbroker.enqueue_plan([_job(job_id)], T, None)
        opts: dict[str, Any] = {"now": args[0], "events_max": "200"}
        if fresh:
            opts["fresh"] = 1
        reply = rbroker.runner.run(script, keys, [json.dumps(opts), *args[1:8]])
        assert reply[0] == 1
        assert _stored(rbroker, job_id) == _stored(rbroker, "plain")
        member = rbroker.client.hget(rbroker.keys.job("default", job_id), "rk")
        assert member[16:17] == (b"." if fresh else b":")
    events, _ = rbroker.events_read(None, 100)
    assert [e["job_id"] for e in events if e["type"] == "enqueued"] == ["plain", "obj", "objf"]
    assert {e["at"] for e in events} == {T}
