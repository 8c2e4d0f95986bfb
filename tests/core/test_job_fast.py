"""``Job.fast``, the one hot-path Job builder, and the fast paths that use it.

Adding a field to ``Job`` without teaching the fast paths about it must fail here: the builder
refuses fields it cannot fill, and each fast path (plain enqueue, Redis claim) must give a job
with every field, equal to the one the normal constructor or decoder gives.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from conveyor import Conveyor
from conveyor.broker.redis.codec import claimed_job
from conveyor.core.job import FAST_REQUIRED, Job
from conveyor.core.serialization import encode_envelope, job_from_dict
from conveyor.core.state import JobState
from conveyor.handles import JobHandle

JOB_FIELDS = {f.name for f in dataclasses.fields(Job)}


def every_field_set() -> dict[str, Any]:
    """A value for every field of Job, none of them the default."""
    values: dict[str, Any] = {
        "id": "01JABCDEFGHJKMNPQRSTVWXYZ0",
        "task": "mod.work",
        "args": [1, "a"],
        "kwargs": {"k": [2]},
        "queue": "q1",
        "priority": -3,
        "state": JobState.RETRY_SCHEDULED,
        "attempts": 2,
        "max_attempts": 7,
        "timeout": 5.5,
        "run_at": 1000.25,
        "created_at": 999.5,
        "started_at": 1000.0,
        "finished_at": 1001.0,
        "result": {"r": 1},
        "last_error": "ValueError: no",
        "errors": [{"attempt": 1, "kind": "error"}],
        "history": [{"event": "release", "at": 1.0}],
        "idempotency_key": "key-1",
        "idempotency_ttl": 60.0,
        "metadata": {"m": "v"},
        "lost": 1,
        "worker_id": "w-1",
        "lease_expires_at": 1030.0,
        "retry_on": ["builtins.OSError"],
        "dead_on": ["builtins.KeyError"],
        "expires_at": 4000.0,
        "flow": {"g": "rate:mod.work", "r": [["rate:mod.work", 10.0, 1.0, 10.0]]},
    }
    assert set(values) == JOB_FIELDS, "a new Job field needs a value here"
    return values


def test_fast_job_has_every_field_and_equals_the_normal_constructor() -> None:
    minimal = {name: [] if name in ("args", "errors", "history") else {} for name in FAST_REQUIRED}
    minimal.update(id="j1", task="t")
    job = Job.fast(minimal)
    assert set(vars(job)) == JOB_FIELDS
    assert job == Job(id="j1", task="t")
    full = every_field_set()
    assert Job.fast(dict(full)) == Job(**full)
    assert set(vars(Job.fast(dict(full)))) == JOB_FIELDS


def test_every_field_is_either_required_or_has_a_plain_default() -> None:
    for f in dataclasses.fields(Job):
        if f.name not in FAST_REQUIRED:
            assert f.default is not dataclasses.MISSING, f"{f.name}: add it to FAST_REQUIRED"


def test_fast_refuses_a_class_with_a_field_it_cannot_fill() -> None:
    @dataclass
    class Grown(Job):
        tags: list[str] = field(default_factory=list)

    values = every_field_set()
    with pytest.raises(TypeError, match="tags"):
        Grown.fast(values)


def test_the_plain_enqueue_path_builds_every_field() -> None:
    app = Conveyor("memory://")

    @app.task(queue="hq", priority=2, timeout=3.0, max_attempts=6, idempotency_ttl=9.0)
    def work(a: int) -> None: ...

    handle = app.enqueue("work", args=[1])
    handle_fields = {f.name for f in dataclasses.fields(JobHandle)}
    assert set(vars(handle)) == handle_fields
    plain = Job(**{name: getattr(handle, name) for name in JOB_FIELDS})
    assert plain == app.broker.get(handle.id)
    built = app.build_job(work.spec(1), handle.created_at)
    assert set(vars(built)) == JOB_FIELDS and type(built) is Job


def test_the_redis_claim_path_decodes_every_field() -> None:
    values = every_field_set()
    raw = encode_envelope(Job(**values))
    item = [values["id"].encode(), b"3.1", raw, [3, None, None, None, None, None]]
    job = claimed_job(item, "q1", 2000.0, 2030.0, "w-2")
    assert set(vars(job)) == JOB_FIELDS
    expected = job_from_dict(orjson.loads(raw))
    overrides = {
        "state": JobState.ACTIVE,
        "attempts": 3,
        "started_at": 2000.0,
        "finished_at": None,
        "result": None,
        "worker_id": "w-2",
        "lease_expires_at": 2030.0,
    }
    for name, value in overrides.items():
        setattr(expected, name, value)
    assert job == expected


def test_the_envelope_decoder_and_handles_keep_every_field() -> None:
    values = every_field_set()
    job = Job(**values)
    decoded = job_from_dict(orjson.loads(encode_envelope(job)))
    assert set(vars(decoded)) == JOB_FIELDS and decoded == job
    handle = JobHandle.bind(job, Conveyor("memory://"))
    assert set(vars(handle)) == {f.name for f in dataclasses.fields(JobHandle)}
    assert Job(**{name: getattr(handle, name) for name in JOB_FIELDS}) == job
