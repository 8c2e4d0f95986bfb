"""Contract: flow control (issue 15) applies to workflow nodes (issue 16) too.

A node of a rate-limited task waits in its flow group like any job: when the workflow is
stored (a node without parents) and when its last parent releases it.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, ErrorKind, FakeClock, JobState, chain, group


@pytest.fixture(autouse=True)
def _both_features(app: Conveyor) -> None:
    if not getattr(app.broker, "supports_flow", False):
        pytest.skip(f"no flow control on {type(app.broker).__name__}")


def claim(app: Conveyor, clock: FakeClock) -> Any:
    return app.broker.claim(["default"], clock.now(), limit=10, visibility_timeout=3600.0)


def test_workflow_nodes_stored_pending_wait_in_their_flow_group(
    app: Conveyor, clock: FakeClock
) -> None:
    @app.task(name="wfl.limited", rate_limit="1/m")
    def limited(i: int) -> int:
        return i

    group(limited.partial(i) for i in range(3)).enqueue()
    first = claim(app, clock)
    assert len(first) == 1, "one token: the other two nodes wait in the group"
    empty = claim(app, clock)
    assert empty == [] and empty.next_due == pytest.approx(clock.now() + 60, abs=1e-3)


def test_a_released_workflow_node_waits_in_its_flow_group(app: Conveyor, clock: FakeClock) -> None:
    @app.task(name="wfl.start")
    def start() -> int:
        return 1

    @app.task(name="wfl.limited2", rate_limit="1/m")
    def limited(x: int) -> int:
        return x

    limited.enqueue(0)  # takes the only token of the minute
    assert len(claim(app, clock)) == 1
    flow = chain(start.partial(), limited.partial()).enqueue()
    app.worker().run_until_idle()  # runs `start`; its dependant is released, then throttled
    jobs = flow.jobs()
    assert [j.state for j in jobs] == [JobState.COMPLETED, JobState.PENDING]
    empty = claim(app, clock)
    assert empty == [] and empty.next_due == pytest.approx(clock.now() + 60, abs=1e-3)
    clock.advance(60)
    assert [lease.id for lease in claim(app, clock)] == [jobs[1].id]


def test_an_expired_workflow_node_ends_its_dependants(app: Conveyor, clock: FakeClock) -> None:
    """A node that lapsed (never ran: issue 15) counts as a failed parent (issue 16)."""

    @app.task(name="wfl.first")
    def first() -> int:
        return 1

    @app.task(name="wfl.then")
    def then(x: int) -> int:
        return x

    flow = chain(first.options(expires_in=5).partial(), then.partial()).enqueue()
    clock.advance(10)
    app.worker().run_until_idle()
    parent, child = flow.jobs()
    assert parent.state is JobState.EXPIRED
    assert child.state is JobState.CANCELLED, "not left waiting forever"
    assert child.errors[-1]["kind"] == ErrorKind.UPSTREAM_FAILED


def test_cancelling_a_running_job_frees_its_concurrency_slot(
    app: Conveyor, clock: FakeClock
) -> None:
    """cancel_running (issue 16) ends a lease like complete or fail: the slot frees (issue 15)."""

    @app.task(name="wfl.single", concurrency=1)
    def single(i: int) -> None: ...

    single.enqueue(0)
    single.enqueue(1)
    first = claim(app, clock)
    assert len(first) == 1 and claim(app, clock) == [], "one slot"
    app.broker.cancel_running(first[0].id, first[0].token, clock.now())
    assert [lease.job.args for lease in claim(app, clock)] == [[1]]
