"""Issue 15's Redis fair-group number: a claimed job of a flow group (its envelope has the one
extra key ``flow``) is decoded by the claim's fast path (``claimjob.plain_job``) like a job
without options, and gives the same Job as the full decoder."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from conveyor import ConcurrencyLimit, Conveyor
from conveyor.broker.redis import codec
from conveyor.core.serialization import encode_envelope, job_from_dict
from conveyor.core.state import JobState


@pytest.mark.parametrize("limits", [{"fair_by": "key"}, {"concurrency": ConcurrencyLimit(2)}])
def test_a_grouped_job_takes_the_plain_claim_path(
    monkeypatch: pytest.MonkeyPatch, limits: dict[str, Any]
) -> None:
    app = Conveyor("memory://")

    @app.task(name="grouped", **limits)
    def grouped(key: str, i: int) -> None: ...

    job = app.broker.get(grouped.enqueue("tenant-1", 7).id)
    raw = encode_envelope(job)
    assert set(orjson.loads(raw)) >= {"flow"}
    plain = []
    original = codec._plain_job

    def spy(*args: Any) -> Any:
        plain.append(1)
        return original(*args)

    monkeypatch.setattr(codec, "_plain_job", spy)
    item = [job.id.encode(), b"5:default", raw, None]  # a fresh job (issue 18: no hash values)
    got = codec.claimed_job(item, "default", 2000.0, 2030.0, "w-1")
    assert plain == [1]  # the fast path, not the full decoder
    expected = job_from_dict(orjson.loads(raw))
    expected.state, expected.attempts, expected.worker_id = JobState.ACTIVE, 1, "w-1"
    expected.started_at, expected.lease_expires_at = 2000.0, 2030.0
    assert got == expected and got.flow == job.flow
    app.close()
