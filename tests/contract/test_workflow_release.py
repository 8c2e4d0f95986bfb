"""Contract: what a workflow node does when its parents let it go (issue 16, session 5).

* A node's own delay (``.options(delay=...)``) counts from its release: it becomes
  ``scheduled`` for release time + delay; a ``run_at`` is a lower bound.
* Requeueing a node that never got its parents' results (it ended ``upstream_failed``, or
  was cancelled while waiting) reads them again: from its edges, or from a parent that was
  requeued and completed since; a parent without a result is named in a ``ValidationError``.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, ErrorKind, FakeClock, JobState, PermanentError, chain, group
from conveyor.errors import ValidationError


def tasks(app: Conveyor) -> Any:
    failing: dict[str, bool] = {"on": True}

    class T:
        flags = failing

        @app.task
        def start() -> int:
            return 1

        @app.task
        def later(x: int) -> int:
            return x + 1

        @app.task
        def total(xs: list[int]) -> int:
            return sum(xs)

        @app.task(max_attempts=1)
        def flaky(x: int) -> int:
            if failing["on"]:
                raise PermanentError("down")
            return x * 10

    return T


def test_a_node_s_own_delay_counts_from_its_release(app: Conveyor, clock: FakeClock) -> None:
    t = tasks(app)
    t0 = clock.now()
    flow = chain(t.start.s(), t.later.options(delay=60).s()).enqueue()
    clock.advance(30)
    app.worker().run_until_idle()  # start runs at t0 + 30: later is due at t0 + 90
    node = flow.jobs()[1]
    assert node.state is JobState.SCHEDULED
    assert node.run_at == pytest.approx(t0 + 90, abs=1e-3)
    assert node.args == [1]
    clock.advance(59)
    app.worker().run_until_idle()
    assert flow.jobs()[1].state is JobState.SCHEDULED
    clock.advance(1)
    app.worker().run_until_idle()
    assert flow.result() == 2


def test_a_first_node_with_a_delay_runs_after_it(app: Conveyor, clock: FakeClock) -> None:
    """A node without parents is scheduled like any job (Redis left it unpromoted before)."""
    t = tasks(app)
    flow = chain(t.start.options(delay=100).s(), t.later.s()).enqueue()
    app.worker().run_until_idle()
    assert flow.jobs()[0].state is JobState.SCHEDULED
    clock.advance(100)
    app.worker().run_until_idle()
    assert flow.result() == 2


def test_a_node_s_run_at_is_a_lower_bound(app: Conveyor, clock: FakeClock) -> None:
    t = tasks(app)
    t0 = clock.now()
    late = chain(t.start.s(), t.later.options(run_at=t0 + 1000).s()).enqueue()
    soon = chain(t.start.s(), t.later.options(run_at=t0 + 5).s()).enqueue()
    clock.advance(10)
    app.worker().run_until_idle()
    assert soon.result() == 2  # its run_at passed before the release: runs at once
    node = late.jobs()[1]
    assert node.state is JobState.SCHEDULED and node.run_at == pytest.approx(t0 + 1000, abs=1e-3)
    clock.advance(990)
    app.worker().run_until_idle()
    assert late.result() == 2


def test_requeue_of_an_upstream_failed_node_reads_its_parents_again(app: Conveyor) -> None:
    t = tasks(app)
    flow = chain(t.start.s(), t.flaky.s(), t.later.s()).enqueue()
    worker = app.worker()
    worker.run_until_idle()
    parent, child = flow.jobs()[1], flow.jobs()[2]
    assert parent.state is JobState.DEAD_LETTER
    assert child.state is JobState.CANCELLED
    assert child.errors[-1]["kind"] == ErrorKind.UPSTREAM_FAILED
    with pytest.raises(ValidationError) as info:
        app.requeue_dead(child.id)  # its parent has no result: say which one
    assert info.value.field == "job_id" and parent.id in info.value.rule
    assert app.broker.get(child.id).state is JobState.CANCELLED  # nothing changed
    t.flags["on"] = False
    assert app.requeue_dead(parent.id)
    worker.run_until_idle()
    assert app.broker.get(parent.id).result == 10
    assert app.broker.get(child.id).state is JobState.CANCELLED  # not released twice
    assert app.requeue_dead(child.id)
    worker.run_until_idle()
    done = app.broker.get(child.id)
    assert done.state is JobState.COMPLETED and done.args == [10] and done.result == 11
    assert flow.result() == 11
    assert app.requeue_dead(child.id) is False  # completed: nothing to requeue


def test_requeue_of_a_cancelled_waiting_callback_gets_every_result(app: Conveyor) -> None:
    t = tasks(app)
    both = chain(group(t.later.s(i) for i in range(3)), t.total.s()).enqueue()
    callback = both.ids[-1]
    assert app.cancel(callback)  # cancelled while waiting: it never got the results
    app.worker().run_until_idle()
    assert app.requeue_dead(callback)
    app.worker().run_until_idle()
    assert app.broker.get(callback).args == [[1, 2, 3]] and both.result() == 6


def test_requeue_of_a_released_node_keeps_its_inputs(app: Conveyor) -> None:
    t = tasks(app)
    t.flags["on"] = True
    flow = chain(t.start.s(), t.flaky.s()).enqueue()
    app.worker().run_until_idle()
    node = flow.jobs()[1]
    assert node.state is JobState.DEAD_LETTER and node.args == [1]
    t.flags["on"] = False
    assert app.requeue_dead(node.id)
    app.worker().run_until_idle()
    assert app.broker.get(node.id).args == [1] and flow.result() == 10  # not injected twice
