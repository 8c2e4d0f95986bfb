"""The Redis fast lane's fallback: redis-py configurations the lane does not serve.

``scripts.FastLane`` talks to redis-py's private attributes (hiredis ``Reader``, socket,
buffer) when it can. These tests force every other path on the real redis-server and run the
same round trip of the broker contract (enqueue, claim, complete, fail with retry and to the
dead letter, release, extend, get, counts, reap) on each:

* ``no_hiredis``: the pure-Python RESP2 parser (the lane falls back to the public
  ``send_packed_command`` / ``read_response``);
* ``no_private``: a redis-py without the private attributes the lane uses (simulated by clearing
  the lane's imports, as a redis-py outside the pinned range would look);
* ``decode_responses``: ``?decode_responses=true`` in the URL (ignored: Conveyor reads bytes;
  a client built with it elsewhere runs scripts on the public API, last test);
* ``resp3``: ``?protocol=3`` in the URL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis._parsers import _RESP2Parser

import redis
from conveyor.broker.base import Ack
from conveyor.broker.redis import RedisBroker, scripts
from conveyor.core.job import Job
from conveyor.core.state import JobState
from conveyor.errors import DuplicateJob, LeaseLost

from .conftest import T0

VARIANTS = ("no_hiredis", "no_private", "decode_responses", "resp3")


@pytest.fixture(params=VARIANTS)
def fbroker(
    request: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RedisBroker]:
    """A flushed broker whose script calls take the fallback path named by the param."""
    variant = request.param
    url = redis_server.url
    if variant == "decode_responses":
        url += "?decode_responses=true"
    elif variant == "resp3":
        url += "?protocol=3"
    elif variant == "no_private":
        monkeypatch.setattr(scripts, "_NOT_ENOUGH_DATA", None)
        monkeypatch.setattr(scripts, "_hiredis_pack", None)
    broker = RedisBroker.from_url(url)
    if variant == "no_hiredis":  # before the first connection is made (from_url does no I/O)
        pool = broker.client.connection_pool
        pool.connection_kwargs["parser_class"] = _RESP2Parser
        pool.reset()
    broker.flush_all()
    yield broker
    broker.close()


def job(job_id: str, queue: str = "default", **kw: Any) -> Job:
    kw.setdefault("run_at", T0)
    return Job(id=job_id, task="t", queue=queue, created_at=T0, **kw)


def test_fallback_round_trip(fbroker: RedisBroker) -> None:
    b = fbroker
    results = b.enqueue([job("a"), job("b"), job("c", idempotency_key="k"), job("d")], T0)
    assert [r.state for r in results] == [JobState.PENDING] * 4
    again = b.enqueue([job("c2", idempotency_key="k")], T0)
    assert again[0].duplicate and again[0].id == "c"
    with pytest.raises(DuplicateJob):
        b.enqueue([job("a")], T0)
    claimed = b.claim(["default"], T0, limit=4, worker_id="w1")
    leases = {lease.id: lease for lease in claimed}
    assert sorted(leases) == ["a", "b", "c", "d"]
    assert leases["a"].job.attempts == 1 and leases["a"].job.worker_id == "w1"
    assert b.extend([("a", leases["a"].token), ("b", "1:default")], T0, 30.0) == [True, False]
    assert b.complete([Ack("a", leases["a"].token, result={"x": 1})], T0 + 1) == [True]
    assert b.complete([Ack("a", leases["a"].token)], T0 + 1) == [False]
    err = {"type": "ValueError", "message": "boom", "kind": "error"}
    assert (
        b.fail("b", leases["b"].token, T0, error=err, retry_at=T0 + 5) is JobState.RETRY_SCHEDULED
    )
    with pytest.raises(LeaseLost):
        b.fail("b", leases["b"].token, T0, error=err, retry_at=None)
    assert b.fail("c", leases["c"].token, T0, error=err, retry_at=None) is JobState.DEAD_LETTER
    assert b.release("d", leases["d"].token, T0, delay=0.0) is JobState.PENDING
    done = b.get("a")
    assert done is not None and done.state is JobState.COMPLETED and done.result == {"x": 1}
    dead = b.get("c")
    assert dead is not None and dead.last_error and "boom" in dead.last_error
    empty = b.claim(["default"], T0, limit=4, worker_id="w1")
    assert [lease.id for lease in empty] == ["d"]
    assert b.claim(["default"], T0, limit=1).next_due == T0 + 5
    assert b.reap_expired(T0 + 1000) == 1  # d's lease ran out
    counts = b.counts()["default"]
    assert counts["completed"] == 1 and counts["dead_letter"] == 1
    assert b.cancel("d", T0 + 1000) is True
    assert b.requeue("c", T0 + 1000) is True


def test_fallback_takes_the_public_path(fbroker: RedisBroker, request: Any) -> None:
    variant = request.node.callspec.params["fbroker"]
    lane = fbroker.runner._lane
    if variant == "resp3":  # replies need redis-py's RESP3 handling: the regular client path
        assert lane is None
        return
    assert lane is not None
    conn = lane._take()
    try:  # decode_responses is dropped from the URL (see below): the raw lane serves it
        assert (scripts._wire(conn) is None) == (variant in ("no_hiredis", "no_private"))
    finally:
        lane._idle.append(conn)


def test_decode_responses_in_the_url_is_ignored(redis_server: Any) -> None:
    """Conveyor's client reads bytes (payloads are bytes): the URL option cannot break it."""
    broker = RedisBroker.from_url(redis_server.url + "?decode_responses=true")
    try:
        assert not broker.client.connection_pool.connection_kwargs.get("decode_responses")
    finally:
        broker.close()


@pytest.mark.parametrize("options", [{"decode_responses": True}, {"protocol": 3}])
def test_script_runner_on_a_client_the_lane_does_not_serve(
    redis_server: Any, options: dict[str, Any]
) -> None:
    """A client built elsewhere (decode_responses / RESP3) runs scripts on the public API."""
    client = redis.Redis.from_url(redis_server.url, **options)
    runner = scripts.ScriptRunner(client)
    broker = RedisBroker.from_url(redis_server.url)
    try:
        assert runner._lane is None
        keys = broker.qkeys("fallback")
        assert runner.run("promote", keys, [repr(T0), 10]) == 0
        assert runner.run_many([scripts.Call("promote", keys, [repr(T0), 10])] * 2) == [0, 0]
    finally:
        runner.close()
        client.close()
        broker.close()


def test_installed_redis_py_is_in_the_pinned_range_and_serves_the_raw_lane(
    rbroker: RedisBroker,
) -> None:
    """The pin in pyproject.toml covers the installed redis-py, and on it the lane really runs
    on the private attributes (a redis-py that renamed them would silently lose the lane)."""
    import redis as redis_py

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    match = re.search(r'"redis\[hiredis\]>=(\d+)\.(\d+),<(\d+)"', pyproject)
    assert match is not None, "pyproject.toml must pin redis-py to a range"
    low, high = (int(match[1]), int(match[2])), int(match[3])
    major, minor = (int(x) for x in redis_py.__version__.split(".")[:2])
    assert low <= (major, minor) and major < high
    lane = rbroker.runner._lane
    assert lane is not None
    conn = lane._take()
    try:
        assert scripts._wire(conn) is not None
    finally:
        lane._idle.append(conn)
