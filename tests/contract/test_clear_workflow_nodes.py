"""Contract: clearing a queue never leaves a workflow waiting for ever.

``clear_queue`` deletes the queue's plain waiting jobs, but a workflow node among them is
cancelled instead (as ``cancel`` would): its dependants end by their failure policy in the same
step, so the workflow finishes (failed) and nothing stays ``waiting``. A dependant the clear
releases into the same queue (policy ``continue``) is cleared in turn: the queue is empty after.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, ErrorKind, FakeClock, JobState, WorkflowFailed, chain, chord


def _tasks(app: Conveyor) -> Any:
    @app.task(name="step")
    def step(*xs: Any) -> int:
        return len(xs)

    return step


def test_clear_cancels_a_pending_node_and_its_dependants_end(
    app: Conveyor, clock: FakeClock
) -> None:
    step = _tasks(app)
    plain = app.enqueue("step", queue="q")
    flow = chain(
        step.options(queue="q").si(),
        step.options(queue="other").s(),
        step.options(queue="other").s(),
    ).enqueue()
    ids = [j.id for j in flow.jobs()]
    assert [j.state for j in flow.jobs()] == [JobState.PENDING, JobState.WAITING, JobState.WAITING]

    assert app.broker.clear_queue("q", clock.now()) == 2  # the plain job and node a
    assert app.broker.get(plain.id) is None
    b, c = (app.broker.get(i) for i in ids[1:])
    assert b is not None and c is not None
    assert b.state is c.state is JobState.CANCELLED  # not left waiting for ever
    a = app.broker.get(ids[0])
    assert a is not None and a.state is JobState.CANCELLED
    assert b.errors[-1]["kind"] == ErrorKind.UPSTREAM_FAILED
    assert b.errors[-1]["parent"] == a.id and c.errors[-1]["parent"] == b.id
    assert flow.done() and flow.status()["waiting"] == 0
    with pytest.raises(WorkflowFailed) as info:
        flow.result()
    assert info.value.job.state is JobState.CANCELLED  # as after handle.cancel()
    assert app.worker(queues=["q", "other"]).run_until_idle() == 0
    counts = app.broker.counts()["q"]
    assert counts["pending"] == counts["scheduled"] == counts["retry_scheduled"] == 0


def test_clear_ends_a_continue_chain_in_the_same_queue(app: Conveyor, clock: FakeClock) -> None:
    step = _tasks(app)
    q = step.options(queue="q")
    flow = chain(q.si(), q.s(), q.s()).enqueue(policy="continue")
    assert app.broker.clear_queue("q", clock.now()) == 3
    assert {j.state for j in flow.jobs()} == {JobState.CANCELLED}
    assert flow.done()
    with pytest.raises(WorkflowFailed):
        flow.result()
    counts = app.broker.counts()["q"]
    assert counts["pending"] == counts["scheduled"] == counts["retry_scheduled"] == 0
    assert counts["cancelled"] == 3


def test_clear_cancels_scheduled_and_rate_limited_nodes(app: Conveyor, clock: FakeClock) -> None:
    """A delayed node (``scheduled``) and, where flow control exists, one waiting in its flow
    group (issue 15) are cancelled too; the chord callback after them ends."""
    step = _tasks(app)
    flow_ok = getattr(app.broker, "supports_flow", False)
    if flow_ok:

        @app.task(name="limited", rate_limit="1/m")
        def limited(*xs: Any) -> int:
            return len(xs)

        app.enqueue("limited", queue="q")
        assert len(app.broker.claim(["q"], clock.now(), limit=5, visibility_timeout=86400)) == 1
    q = step.options(queue="q")
    roots = [q.options(delay=3600).si(), q.si()]
    if flow_ok:
        roots.append(limited.options(queue="q").si())  # no token left: waits in its group
    flow = chord(roots, step.options(queue="other").s()).enqueue()
    ids = [j.id for j in flow.jobs()]
    assert app.broker.clear_queue("q", clock.now()) == len(roots)
    callback = app.broker.get(ids[-1])
    assert callback is not None and callback.state is JobState.CANCELLED
    assert all(app.broker.get(i).state is JobState.CANCELLED for i in ids)  # type: ignore[union-attr]
    assert flow.done()
    clock.advance(7200)
    assert app.broker.claim(["q", "other"], clock.now(), limit=10) == []
