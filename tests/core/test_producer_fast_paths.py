"""The producer's fast paths give exactly what the general paths give.

``PlainEnvelopes`` must write the same bytes as ``encode_envelope``; ``IdRandom`` must give
valid, unique ULIDs, also across ``fork``; jobs built without options must equal the ones
``build_job`` used to build.
"""

from __future__ import annotations

import os
import random

import pytest

from conveyor import Conveyor
from conveyor.core.ids import IdRandom, new_ulid, ulid_time
from conveyor.core.job import Job
from conveyor.core.serialization import decode_job, encode_envelope
from conveyor.errors import PayloadTooLarge, ValidationError
from conveyor.producer_envelopes import PlainEnvelopes
from conveyor.task import JobSpec


@pytest.mark.parametrize(
    ("args", "kwargs", "extra"),
    [
        ([1, 0.0, 1.5], {}, {}),
        ([], {"a": "x", "b": None, "c": True}, {"timeout": 5.0}),
        (["é", 2**63 - 1, -(2**63)], {"$dt": 1}, {"idempotency_ttl": 10.0, "priority": -3}),
        ([{"nested": [1, 2]}, b"raw"], {"k": {"$map": 1}}, {"max_attempts": 9}),
    ],
)
def test_plain_envelopes_are_byte_identical(args: list, kwargs: dict, extra: dict) -> None:
    at = 1763800000.123456
    job = Job(
        id="01JABCDEFGHJKMNPQRSTVWXYZ0",
        task="mod.task",
        args=args,
        kwargs=kwargs,
        queue="q-1",
        run_at=at,
        created_at=at,
        **extra,
    )
    envelopes = PlainEnvelopes()
    assert envelopes.encode(job) == encode_envelope(job)
    assert envelopes.encode(job) == encode_envelope(job)  # from the cached template
    assert decode_job(envelopes.encode(job)) == decode_job(encode_envelope(job))


def test_plain_envelopes_refuse_what_encode_envelope_refuses() -> None:
    job = Job(id="x", task="t", args=[float("nan")], run_at=1.0, created_at=1.0)
    with pytest.raises(ValidationError):
        PlainEnvelopes().encode(job)
    big = Job(id="x", task="t", args=["x" * 2000], run_at=1.0, created_at=1.0)
    with pytest.raises(PayloadTooLarge):
        PlainEnvelopes(limit=1000).encode(big)


def test_id_random_gives_unique_valid_ulids() -> None:
    rng = IdRandom()
    ids = [new_ulid(1763800000.5, rng) for _ in range(5000)]
    assert len(set(ids)) == 5000
    alphabet = set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert all(len(i) == 26 and set(i) <= alphabet for i in ids)
    assert {ulid_time(i) for i in ids} == {1763800000.5}
    assert rng.getrandbits(80) < 2**80  # other draws: plain SystemRandom


def test_id_random_forked_child_does_not_repeat_the_parent() -> None:
    rng = IdRandom()
    new_ulid(1.0, rng)  # fill the block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write, "".join(new_ulid(1.0, rng) for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 100_000).decode()
    os.close(read)
    child_ids = {child[i : i + 26] for i in range(0, len(child), 26)}
    parent_ids = {new_ulid(1.0, rng) for _ in range(50)}
    assert len(child_ids) == 50 and not child_ids & parent_ids


def test_jobs_without_options_match_the_general_builder() -> None:
    app = Conveyor("memory://")
    app.id_rng = random.Random(7)

    @app.task(queue="hq", priority=2, timeout=3.0, max_attempts=6, idempotency_ttl=9.0)
    def work(a: int, b: int = 0) -> None: ...

    plain = app.build_job(JobSpec("work", (1,), {"b": 2}), 100.0)
    general = app.build_job(JobSpec("work", (1,), {"b": 2}, {"priority": 2}), 100.0)
    general.id = plain.id
    assert plain == general
    handle = app.enqueue("work", args=[1], kwargs={"b": 2})
    stored = app.get_job(handle.id)
    assert (stored.queue, stored.priority, stored.timeout) == ("hq", 2, 3.0)
    assert stored.max_attempts == 6
    assert handle.duplicate is False and stored.args == [1] and stored.kwargs == {"b": 2}
