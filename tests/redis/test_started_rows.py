"""Issue 18 (session 10): the "started" event row of a fresh job comes from its envelope.

claim.lua copies the task's JSON text out of the envelope with plain finds (no pattern scans
the task); anything that is not Conveyor's plain layout — an escape in the task, an envelope of
another id, a truncated or non-JSON payload — takes cjson, and no payload can make the claim
fail or make the other jobs' events of the same call unreadable.
"""

from __future__ import annotations

from typing import Any

from conveyor.broker.redis import RedisBroker
from conveyor.core.job import Job

from .conftest import T0


def _job(job_id: str, task: str = "mod.work") -> Job:
    return Job(id=job_id, task=task, queue="default", created_at=T0, run_at=T0)


def _plant(rbroker: RedisBroker, job_id: str, payload: bytes) -> None:
    rbroker.client.hset(rbroker.keys.queue_key("default", "payloads"), job_id, payload)


def _started(rbroker: RedisBroker) -> dict[str, Any]:
    events, _ = rbroker.events_read(None, 1000)
    return {e["job_id"]: e.get("task") for e in events if e.get("type") == "started"}


def _claim_all(rbroker: RedisBroker, n: int) -> None:
    rbroker.claim(["default"], T0, limit=n, visibility_timeout=30, worker_id="w")


def test_task_names_of_every_legal_shape_reach_the_started_events(rbroker: RedisBroker) -> None:
    tasks = ["t", "mod.work", "app.tasks:send_email", "a_b-c.D9", "x" * 200]
    for n in (1, len(tasks)):  # one job (a flat entry) and a batch entry
        rbroker.flush_all()
        rbroker.enqueue([_job(f"j{i}", task) for i, task in enumerate(tasks[:n])], T0)
        _claim_all(rbroker, n)
        assert _started(rbroker) == {f"j{i}": task for i, task in enumerate(tasks[:n])}


def test_envelopes_off_the_plain_layout_take_cjson_and_spoil_nothing(
    rbroker: RedisBroker,
) -> None:
    planted = {
        "q": b'{"v":1,"id":"q","task":"a\\"b","queue":"default","args":[],"kwargs":{}}',
        "u": b'{"v":1,"id":"u","task":"caf\\u00e9","queue":"default","args":[],"kwargs":{}}',
        "o": b'{"v":1,"id":"other","task":"mod.x","queue":"default","args":[],"kwargs":{}}',
        "cut": b'{"v":1,"id":"cut","task":"mod.trunc',
        "raw": b'{"v":1,"id":"raw","task":"a\x01b","queue":"default","args":[],"kwargs":{}}',
        "bin": b'{"v":1,"id":"bin","task":"a\xff\xfeb","queue":"default","args":[],"kwargs":{}}',
        "junk": b"\x00not json",
    }
    ids = ["ok1", *planted, "ok2"]
    rbroker.enqueue([_job(i) for i in ids], T0)
    for job_id, payload in planted.items():
        _plant(rbroker, job_id, payload)
    _claim_all(rbroker, len(ids))
    started = _started(rbroker)
    assert sorted(started) == sorted(ids)  # every job's event, in one readable batch entry
    assert started["ok1"] == started["ok2"] == "mod.work"
    assert started["q"] == 'a"b' and started["u"] == "café" and started["o"] == "mod.x"
    assert started["cut"] == "" and started["junk"] == ""
    assert started["raw"] == "a\x01b" and started["bin"].startswith("a")


def test_one_planted_envelope_alone_is_a_flat_event(rbroker: RedisBroker) -> None:
    for payload in (b'{"v":1,"id":"a","task":"mod.trunc', b'{"v":1,"id":"a","task":"a\x01b"}'):
        rbroker.flush_all()
        rbroker.enqueue([_job("a")], T0)
        _plant(rbroker, "a", payload)
        _claim_all(rbroker, 1)
        assert list(_started(rbroker)) == ["a"]
