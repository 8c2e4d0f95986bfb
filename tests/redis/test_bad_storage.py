"""Garbage planted directly in Redis: claim dead-letters it (decode_error), the worker goes on."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

import redis
from conveyor import Conveyor, FakeClock, JobState, ValidationError
from conveyor.broker.redis import RedisBroker
from conveyor.core.job import Job

from .conftest import T0

GOOD_ENVELOPE = {"v": 1, "id": "?", "task": "noop", "queue": "default", "state": "pending"}
GARBAGE: dict[str, Any] = {
    "not-json": b"{this is not json",
    "empty": b"",
    "array": b"[1, 2, 3]",
    "version-2": orjson.dumps({**GOOD_ENVELOPE, "v": 2}),
    "no-version": orjson.dumps({k: v for k, v in GOOD_ENVELOPE.items() if k != "v"}),
    "missing-fields": orjson.dumps({"v": 1, "id": "missing-fields"}),
    "bad-state": orjson.dumps({**GOOD_ENVELOPE, "state": "exploded"}),
    "bad-args": orjson.dumps({**GOOD_ENVELOPE, "args": {"not": "a list"}, "kwargs": [1]}),
    "bad-typed": orjson.dumps({**GOOD_ENVELOPE, "args": [{"$dt": "yesterday-ish"}]}),
    "non-utf8": b"\xff\xfe\x00garbage",
}


def _plant(client: redis.Redis, job_id: str, payload: bytes, seq: int, **fields: Any) -> None:
    member = f"{seq:016x}:{job_id}"
    mapping = {"state": "pending", "rk": member, **fields}
    client.hset(f"conveyor:{{default}}:job:{job_id}", mapping=mapping)
    client.hset("conveyor:{default}:payloads", job_id, payload)
    client.zadd("conveyor:{default}:ready", {member: 0})


def test_garbage_goes_to_dead_letter_and_the_worker_carries_on(redis_server: Any) -> None:
    broker = RedisBroker.from_url(redis_server.url)
    broker.flush_all()
    app = Conveyor(broker, clock=FakeClock(T0), rng=random.Random(2))
    ran: list[int] = []

    @app.task
    def noop(n: int) -> None:
        ran.append(n)

    first = noop.enqueue(1)
    client = redis.Redis(port=redis_server.port)
    for seq, (job_id, payload) in enumerate(GARBAGE.items(), start=1000):
        _plant(client, job_id, payload, seq)
    _plant(client, "bad-lost", orjson.dumps({**GOOD_ENVELOPE, "id": "bad-lost"}), 2000, lost="many")
    client.set("conveyor:{default}:job:wrong-type", b"a plain string, not a hash")
    client.zadd("conveyor:{default}:ready", {f"{3000:016x}:wrong-type": 0})
    client.zadd("conveyor:{default}:ready", {f"{3001:016x}:vanished": 0})  # no job at all
    last = noop.enqueue(2)

    assert app.worker().run_until_idle() == 2
    assert ran == [1, 2]
    assert first.refresh().state is last.refresh().state is JobState.COMPLETED
    for job_id in [*GARBAGE, "bad-lost", "wrong-type"]:
        job = app.get_job(job_id)
        assert job.state is JobState.DEAD_LETTER, job_id
        assert job.errors[-1]["kind"] == "decode_error", job_id
    assert client.hget("conveyor:{default}:job:not-json", "raw") == GARBAGE["not-json"]
    assert client.hget("conveyor:{default}:job:empty", "raw") == b""
    assert client.hget("conveyor:{default}:job:wrong-type", "raw") == b"a plain string, not a hash"
    counts = broker.counts()["default"]
    assert counts["dead_letter"] == len(GARBAGE) + 2 and counts["pending"] == 0
    assert len(app.dead_letters()) == len(GARBAGE) + 2
    broker.close()


@pytest.mark.parametrize("queue", ["has space", "{braces}", "a:b", "q" * 101, ""])
def test_bad_queue_names_are_refused_by_the_broker(rbroker: RedisBroker, queue: str) -> None:
    with pytest.raises(ValidationError, match="queue"):
        rbroker.enqueue([Job(id="x", task="t", queue=queue, run_at=T0, created_at=T0)], T0)
    with pytest.raises(ValidationError, match="queue"):
        rbroker.claim([queue], T0)
    assert rbroker.queues() == []


def test_a_workflow_node_whose_storage_is_not_a_hash_ends_its_dependants(
    rbroker: RedisBroker,
) -> None:
    # claim dead-letters a job key that is not a hash (bury_foreign): for a workflow node it
    # did not release its dependants (its hash and its "wf" field were gone), which waited
    # for ever
    from conveyor import chain

    app = Conveyor(rbroker, clock=FakeClock(T0), rng=random.Random(2))
    first = app.task(name="first")(lambda: 1)
    then = app.task(name="then")(lambda x: x)
    flow = chain(first.s(), then.s()).enqueue()
    key = f"conveyor:{{default}}:job:{flow.ids[0]}"
    rbroker.client.delete(key)
    rbroker.client.set(key, b"a plain string, not a hash")
    assert rbroker.claim(["default"], T0, limit=10, worker_id="w") == []
    states = [app.get_job(i).state for i in flow.ids]
    assert states == [JobState.DEAD_LETTER, JobState.CANCELLED], states
