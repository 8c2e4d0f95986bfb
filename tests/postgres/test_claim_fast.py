"""The claim's fast decode (``rec.claimed_job``) builds the same Job as the full path.

A job enqueued without options is stored as the 11-key envelope ``envelope_dict`` writes;
the claim builds its Job from a template copy instead of ``job_from_dict`` (the largest worker
CPU cost of a PostgreSQL drain). Anything else (options, typed values, an earlier attempt, a
row that does not match its envelope) must fall back: ``claimed_job`` returns None. No
database needed: rows are built here as ``_CLAIM`` returns them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pytest

from conveyor.broker.postgres.rec import claimed_job, pg_rec
from conveyor.core.job import Job
from conveyor.core.serialization import envelope_dict


def _row(job: Job, payload: bytes, *, queue: str | None = None) -> tuple[Any, ...]:
    """A claimed row: active, claimed once since the envelope was written."""
    return (
        7,
        job.id,
        queue or job.queue,
        job.task,
        "active",
        job.priority,
        job.run_at,
        job.created_at,
        None,
        job.last_error,
        payload,
        1,
        100.5,
        "w1",
        130.5,
    )


PLAIN = [
    Job(id="a", task="t"),
    Job(id="b", task="mod.fn", args=[1, "x", [2.5, None]], kwargs={"k": {"n": True}}),
    Job(id="c", task="t", queue="q2", priority=-3, max_attempts=9, run_at=5.0, created_at=4.0),
]


@pytest.mark.parametrize("job", PLAIN, ids=lambda j: j.id)
def test_a_plain_envelope_decodes_like_the_full_path(job: Job) -> None:
    payload = orjson.dumps(envelope_dict(job))
    row = _row(job, payload)
    fast = claimed_job(row)
    assert fast is not None
    assert fast.__dict__ == pg_rec(row).job.__dict__
    fast.args.append("mine")  # the job owns its containers
    assert claimed_job(row).args == job.args  # type: ignore[union-attr]


NOT_PLAIN = [
    Job(id="d", task="t", args=[dt.date(2026, 1, 1)]),  # a typed value
    Job(id="e", task="t", timeout=3.0),  # an option
    Job(id="f", task="t", attempts=1),  # an earlier attempt
    Job(id="g", task="t", metadata={"m": 1}),
]


@pytest.mark.parametrize("job", NOT_PLAIN, ids=lambda j: j.id)
def test_anything_but_a_plain_envelope_falls_back(job: Job) -> None:
    assert claimed_job(_row(job, orjson.dumps(envelope_dict(job)))) is None


def test_an_envelope_that_does_not_match_its_row_falls_back() -> None:
    job = Job(id="h", task="t")
    payload = orjson.dumps(envelope_dict(job))
    assert claimed_job(_row(job, payload, queue="other")) is None
    assert claimed_job(_row(Job(id="i", task="t"), payload)) is None
    assert claimed_job(_row(job, b"not json")) is None
    assert claimed_job(_row(job, payload.replace(b'"v":1', b'"v":99'))) is None
