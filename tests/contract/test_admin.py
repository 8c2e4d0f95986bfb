"""Contract: cancel, pause/resume, dead letters (list, requeue, purge), search, events."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, IllegalTransition, JobState, PermanentError
from conveyor.broker.base import Broker


def dead_job(app: Conveyor, arg: int = 0) -> str:
    @app.task(name="doomed")
    def doomed(x: int) -> None:
        raise PermanentError(f"bad {x}")

    job = doomed.enqueue(arg)
    app.worker().run_until_idle()
    assert job.refresh().state is JobState.DEAD_LETTER
    return job.id


def test_cancel_before_start_only(app: Conveyor, clock: FakeClock) -> None:
    pending = app.enqueue("t")
    delayed = app.enqueue("t", delay=60)
    running = app.enqueue("t", priority=-1)
    app.broker.claim(["default"], clock.now(), limit=1, visibility_timeout=3600)
    assert app.cancel(pending.id) and app.cancel(delayed.id)
    # Broker.cancel never touches a running job; app.cancel asks its worker (issue 16:
    # tests/contract/test_cancel_running.py), so the job is still active here
    assert not app.broker.cancel(running.id, clock.now())
    assert app.cancel(running.id) and running.refresh().state is JobState.ACTIVE
    assert not app.cancel(pending.id)
    assert pending.refresh().state is JobState.CANCELLED
    clock.advance(61)
    assert app.broker.claim(["default"], clock.now(), limit=5) == []


def test_pause_and_resume(app: Conveyor) -> None:
    app.enqueue("t", queue="mail")
    app.pause("mail")
    assert app.stats()["queues"]["mail"]["paused"] is True
    assert app.broker.claim(["mail"], app.now(), limit=1) == []
    app.resume("mail")
    assert app.stats()["queues"]["mail"]["paused"] is False
    assert len(app.broker.claim(["mail"], app.now(), limit=1)) == 1


def test_dead_letters_requeue_keeps_history(app: Conveyor) -> None:
    job_id = dead_job(app)
    assert [j.id for j in app.dead_letters()] == [job_id]
    assert app.requeue_dead(job_id)
    snap = app.get_job(job_id)
    assert snap.state is JobState.PENDING and snap.attempts == 0
    assert snap.errors[0]["kind"] == "permanent"
    assert snap.history[-1]["event"] == "requeued"
    assert not app.requeue_dead(job_id), "only dead or cancelled jobs can be requeued"
    app.worker().run_until_idle()
    snap = app.get_job(job_id)
    assert snap.state is JobState.DEAD_LETTER and len(snap.errors) == 2


def test_purge_older_than(app: Conveyor, clock: FakeClock) -> None:
    old = dead_job(app, 1)
    clock.advance(3600)
    new = dead_job(app, 2)
    assert app.purge_dead(older_than=1800) == 1
    assert app.broker.get(old) is None and app.broker.get(new) is not None
    assert app.purge_dead() == 1
    assert app.dead_letters() == []


def test_search_filters_and_pagination(app: Conveyor, clock: FakeClock) -> None:
    ids = []
    for i in range(23):
        ids.append(
            app.enqueue(
                "report" if i % 2 else "email", args=[f"user-{i}"], queue="q1" if i < 20 else "q2"
            ).id
        )
        clock.advance(1)
    page1 = app.search(page_size=10)
    assert (page1.total, page1.pages, len(page1.items)) == (23, 3, 10)
    assert [j.id for j in page1.items] == ids[::-1][:10], "newest first"
    page3 = app.search(page=3, page_size=10)
    assert [j.id for j in page3.items] == ids[::-1][20:]
    assert app.search(task="report").total == 11
    assert app.search(queue="q2").total == 3
    assert app.search(text="user-7").total == 1
    assert app.search(since=clock.now() - 3).total == 3
    assert app.search(until=app.get_job(ids[2]).created_at).total == 2
    assert app.search(id=ids[5]).items[0].id == ids[5]
    assert app.search(state="pending").total == 23


def test_search_by_state_and_error(app: Conveyor) -> None:
    dead = dead_job(app, 5)
    Conveyor(app.broker, clock=app.clock).enqueue("t")  # a name-only producer
    page = app.search(state=JobState.DEAD_LETTER, error="PermanentError")
    assert [j.id for j in page.items] == [dead]
    assert app.search(error="nothing like it").total == 0


def test_events_stream_is_resumable(broker: Broker, app: Conveyor) -> None:
    job = app.enqueue("t")
    events, cursor = broker.events_read(None, 100)
    assert [(e["type"], e["job_id"]) for e in events] == [("enqueued", job.id)]
    lease = broker.claim(["default"], app.now(), limit=1)[0]
    from conveyor.broker.base import Ack

    broker.complete([Ack(lease.id, lease.token)], app.now())
    more, cursor2 = broker.events_read(cursor, 100)
    assert [e["type"] for e in more] == ["started", "completed"]
    assert broker.events_read(cursor2, 100)[0] == []


def test_requeue_of_cancelled_job(app: Conveyor) -> None:
    job = app.enqueue("t")
    app.cancel(job.id)
    assert app.requeue_dead(job.id)
    assert job.refresh().state is JobState.PENDING


def test_illegal_transitions_raise(app: Conveyor) -> None:
    from conveyor.core import lifecycle

    job = app.enqueue("t")
    with pytest.raises(IllegalTransition):
        lifecycle.complete(job, 0.0, None)
