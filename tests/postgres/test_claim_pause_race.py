"""A pause that commits while a claim is under way: the claim's look-up read the queue as not
paused, then the pause and a new job commit, then the claim's statement picks jobs. Every
statement that picks jobs checks the pause in its own snapshot, so a job enqueued after the
pause is never leased (a fresh-clone CI saw one run in test_lifecycle: paused, enqueued,
claimed)."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker.postgres import tx as pgtx
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.state import JobState


def test_a_job_enqueued_after_a_pause_is_not_claimed_by_a_claim_already_under_way(
    pg: PostgresBroker, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Conveyor(PostgresBroker.from_url(pg_server.url))
    job_ids: list[str] = []
    real = pgtx.Tx.first_two

    def first_two_then_pause(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)  # the look-up (and the guarded claim) ran
        if not job_ids:  # meanwhile an operator pauses the queue, then a job arrives
            other.pause("default")
            job_ids.append(other.enqueue("tick").id)
        return out

    monkeypatch.setattr(pgtx.Tx, "first_two", first_two_then_pause)
    try:
        claimed = pg.claim(["default"], 1_700_000_000.0, limit=8, worker_id="w1")
        assert job_ids, "the claim's first round trip ran"
        assert list(claimed) == [], "a job enqueued after the pause was leased"
        assert other.get_job(job_ids[0]).state is JobState.PENDING
        other.resume("default")
        again = pg.claim(["default"], 1_700_000_000.0, limit=8, worker_id="w1")
        assert [lease.job.id for lease in again] == job_ids
    finally:
        other.close()


def test_the_same_race_on_the_flow_path_leases_nothing_new(
    pg: PostgresBroker, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fair groups are picked by ``pgflow.take`` after the look-up: its statements check the
    pause too, so a group whose job arrived after the pause is not served by that claim."""
    other = Conveyor(PostgresBroker.from_url(pg_server.url))
    other.task(name="tick", fair_by="tenant")(lambda tenant: None)
    other.enqueue("tick", kwargs={"tenant": "a"})  # groups exist: the claim takes the flow path
    pg.flow_seen = True
    job_ids: list[str] = []
    # the flow path's look-up goes through ``Tx.first_two`` with the first queue's fair
    # statement (one round trip: the race is looked for after both)
    real = pgtx.Tx.first_two

    def look_up_then_pause(self: Any, one: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, one, *args, **kwargs)
        if one is not None and "enable_bitmapscan" in one[0] and not job_ids:  # the look-up ran
            other.pause("default")
            job_ids.append(other.enqueue("tick", kwargs={"tenant": "b"}).id)
        return out

    monkeypatch.setattr(pgtx.Tx, "first_two", look_up_then_pause)
    try:
        claimed = pg.claim(["default"], 1_700_000_000.0, limit=8, worker_id="w1")
        assert job_ids, "the claim's look-up ran"
        assert job_ids[0] not in [lease.job.id for lease in claimed]
        assert other.get_job(job_ids[0]).state is JobState.PENDING
    finally:
        other.close()
