"""Bulk enqueue without idempotency keys reads no row first (the UNIQUE index rejects a taken
id): a duplicate still names the right id and stores none of the batch."""

from __future__ import annotations

import random

import pytest

from conveyor.broker.sqlite import SqliteBroker
from conveyor.core.ids import new_ulid
from conveyor.core.job import Job
from conveyor.errors import DuplicateJob

from .conftest import T0


def _jobs(n: int, rng: random.Random) -> list[Job]:
    return [
        Job(id=new_ulid(T0, rng), task="t", args=[i], run_at=T0, created_at=T0) for i in range(n)
    ]


def test_taken_id_in_the_middle_of_a_batch(sbroker: SqliteBroker) -> None:
    rng = random.Random(3)
    first = _jobs(10, rng)
    sbroker.enqueue(first, T0)
    batch = _jobs(50, rng)
    batch[31] = Job(id=first[4].id, task="t", run_at=T0, created_at=T0)
    with pytest.raises(DuplicateJob) as info:
        sbroker.enqueue(batch, T0)
    assert first[4].id in str(info.value)
    assert sbroker.counts()["default"]["pending"] == 10
    assert sbroker._conn().execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 10
    assert len(sbroker.events_read(None, 1000)[0]) == 10  # no event of the failed batch


def test_same_id_twice_in_one_batch(sbroker: SqliteBroker) -> None:
    batch = _jobs(20, random.Random(4))
    batch[12] = Job(id=batch[7].id, task="t", run_at=T0, created_at=T0)
    with pytest.raises(DuplicateJob) as info:
        sbroker.enqueue(batch, T0)
    assert batch[7].id in str(info.value)
    assert sbroker.counts().get("default", {}).get("pending", 0) == 0
