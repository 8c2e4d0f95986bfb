"""Contract: audited bulk actions (retry, cancel, delete, run now) on selected jobs or on every
match of a search, bounded and recorded as ONE audit entry, on every backend."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState, PermanentError, ValidationError
from conveyor.monitoring import actions
from conveyor.monitoring.actions import Operator


def states(app: Conveyor, ids: list[str]) -> list[JobState]:
    """The state of each job (deleted jobs: None)."""
    out = []
    for job_id in ids:
        snap = app.broker.get(job_id)
        out.append(snap.state if snap is not None else None)
    return out  # type: ignore[return-value]


def test_bulk_run_now_on_selected_jobs(app: Conveyor, clock: FakeClock) -> None:
    ids = [app.runtime.enqueue("t", delay=600).id for _ in range(3)]
    op = Operator(app, actor="ops", source="test")
    result = op.bulk("run_now", ids=[*ids[:2], "no-such-job"])
    assert (result.matched, result.done, result.truncated) == (3, 2, False)
    assert states(app, ids) == [JobState.PENDING, JobState.PENDING, JobState.SCHEDULED]
    entry = app.broker.logs.read(actions.AUDIT_LOG, 10)[-1]
    assert entry["action"] == "jobs.bulk_run_now" and entry["result"] == 2
    assert entry["target"] == "selection" and entry["matched"] == 3 and ids[0] in entry["ids"]


def test_bulk_on_every_search_result(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="doomed")
    def doomed(x: int) -> None:
        raise PermanentError(f"bad {x}")

    for i in range(4):
        doomed.enqueue(i)
    keep = app.runtime.enqueue("other", delay=60).id
    app.worker().run_until_idle()
    op = Operator(app, actor="ops")
    filters = {"task": "doomed", "state": "dead_letter"}
    result = op.bulk("retry", filters=filters)
    assert (result.matched, result.done) == (4, 4)
    assert app.search(task="doomed", state="pending").total == 4
    entries = app.broker.logs.read(actions.AUDIT_LOG, 10)
    assert len(entries) == 1, "one audit entry for the whole bulk action"
    assert entries[0]["filters"] == filters and entries[0]["target"] == "search"
    assert op.bulk("delete", filters={"task": "doomed"}).done == 4
    assert app.search(task="doomed").total == 0
    assert states(app, [keep]) == [JobState.SCHEDULED]
    assert op.bulk("cancel", filters={"task": "other"}).done == 1


def test_bulk_is_bounded(app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actions, "BULK_LIMIT", 3)
    monkeypatch.setattr(actions, "BULK_BATCH", 2)
    ids = [app.runtime.enqueue("t", delay=60).id for _ in range(5)]
    result = Operator(app).bulk("run_now", filters={"task": "t"})
    assert (result.matched, result.done, result.truncated) == (3, 3, True)
    assert states(app, ids).count(JobState.PENDING) == 3
    assert app.broker.logs.read(actions.AUDIT_LOG, 10)[-1]["truncated_at"] == 3
    with pytest.raises(ValidationError) as info:
        Operator(app).bulk("run_now", ids=ids)
    assert info.value.field == "ids"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ids": ["a"], "filters": {}}, "ids"),
        ({}, "ids"),
        ({"ids": "abc"}, "ids"),
        ({"ids": [""]}, "ids"),
        ({"filters": {"nope": "x"}}, "nope"),
        ({"filters": {"state": "bogus"}}, "state"),
    ],
)
def test_bulk_refuses_bad_input(app: Conveyor, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        Operator(app).bulk("retry", **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    with pytest.raises(ValidationError) as info:
        Operator(app).bulk("explode", ids=["a"])
    assert info.value.field == "action"


def test_delete_unfinished_is_opt_in(app: Conveyor) -> None:
    job = app.runtime.enqueue("t")
    op = Operator(app)
    assert not op.delete(job.id), "the API's delete stays finished-only"
    assert op.delete(job.id, unfinished=True)
    assert app.broker.get(job.id) is None


def test_a_search_finds_pending_jobs_held_by_flow_control(app: Conveyor, clock: FakeClock) -> None:
    """Pending jobs waiting in a flow group (a concurrency slot taken, a fair group in line)
    are pending like any other: searched, counted and reached by a bulk action. Redis listed
    only its ready set, so ``bulk delete --task one`` left the held job (and the others were
    counted but never found)."""
    from conveyor import ConcurrencyLimit

    @app.task(name="one", concurrency=ConcurrencyLimit(1, key="account"))
    def one(account: str) -> None: ...

    @app.task(name="fair", fair_by="tenant")
    def fair(tenant: str) -> None: ...

    running = one.enqueue("acme")
    [lease] = app.broker.claim(["default"], clock.now(), limit=1)
    assert lease.id == running.id
    held = [one.enqueue("acme").id for _ in range(2)]
    queued = [fair.enqueue(f"t{i % 2}").id for i in range(3)]
    found = app.search(state="pending")
    assert found.total == app.broker.counts()["default"]["pending"] == 5
    assert {job.id for job in found.items} == {*held, *queued}
    assert {job.id for job in app.search(task="one").items} == {running.id, *held}
    result = Operator(app).bulk("delete", filters={"task": "one", "state": "pending"})
    assert (result.matched, result.done) == (2, 2)
    assert states(app, held) == [None, None]
    assert app.broker.counts()["default"]["pending"] == 3
