"""PostgreSQL ``text`` cannot hold NUL: an error message with a NUL byte (a handler may raise
anything) must still be recorded, searchable, and never fail the transition."""

from __future__ import annotations

import time

from conveyor import JobState
from conveyor.broker.base import SearchQuery
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job


def test_an_error_with_a_nul_byte_is_recorded_and_searchable(pg: PostgresBroker) -> None:
    now = time.time()
    pg.enqueue([Job(id="nul", task="t", args=["\x00"], run_at=now, created_at=now)], now)
    lease = pg.claim(["default"], now)[0]
    error = {"kind": "error", "type": "Bad\x00Error", "message": "m\x00sg", "traceback": ""}
    state = pg.fail(lease.id, lease.token, now, error=error, retry_at=None)
    assert state is JobState.DEAD_LETTER
    job = pg.get("nul")
    assert job is not None and job.errors[-1]["message"] == "m\x00sg"  # the envelope is exact
    assert job.args == ["\x00"]
    assert pg.search(SearchQuery(error="bad")).total == 1
