"""The claim overlay and the completion's envelope patch agree with the full decode path.

``pg_rec`` folds the claim columns into a decoded job; ``completed_envelope`` patches the
stored envelope as a dict. Both must give byte-for-byte the data ``lifecycle`` plus
``job_to_dict`` would have written (no database needed: rows are built here).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import orjson
import pytest

from conveyor.broker.postgres.rec import completed_envelope, pg_rec
from conveyor.core import lifecycle
from conveyor.core.job import Job
from conveyor.core.serialization import job_to_dict
from conveyor.errors import ValidationError

RESULTS: list[Any] = [
    None,
    7,
    "ok",
    {"at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "n": Decimal("1.5")},
    [b"\x00bytes", uuid.UUID(int=5)],
]


def _row(job: Job, claims: int, payload: bytes) -> tuple[Any, ...]:
    return (
        1,
        job.id,
        job.queue,
        job.task,
        "active",
        job.priority,
        job.run_at,
        job.created_at,
        None,
        job.last_error,
        payload,
        claims,
        100.5,
        "w1",
        130.5,
    )


@pytest.mark.parametrize("result", RESULTS)
def test_the_patched_envelope_equals_the_full_path(result: Any) -> None:
    job = Job(id="j1", task="t", args=[1, {"a": "\x00"}], kwargs={"k": [dt.date(2026, 1, 1)]})
    job.attempts = 1
    stored = orjson.dumps(job_to_dict(job))  # as enqueued: pending, one earlier attempt
    row = _row(job, 1, stored)

    full = pg_rec(row)
    assert (full.job.state, full.job.attempts, full.job.worker_id) == ("active", 2, "w1")
    assert (full.job.started_at, full.job.lease_expires_at) == (100.5, 130.5)
    lifecycle.complete(full.job, 140.0, result)
    patched = completed_envelope(row, 140.0, result)
    assert patched is not None and patched[1] == 2
    assert orjson.loads(patched[0]) == orjson.loads(full.payload())


def test_an_unexpected_envelope_is_left_to_the_full_decode() -> None:
    job = Job(id="j1", task="t")
    good = orjson.dumps(job_to_dict(job))
    assert completed_envelope(_row(job, 1, good), 1.0, None) is not None
    assert completed_envelope(_row(job, 0, good), 1.0, None) is None  # says pending, not active
    assert completed_envelope(_row(job, 1, b"{not json"), 1.0, None) is None
    assert completed_envelope(_row(job, 1, good.replace(b'"j1"', b'"j2"', 1)), 1.0, None) is None
    with pytest.raises(ValidationError, match="result"):
        completed_envelope(_row(job, 1, good), 1.0, float("nan"))
