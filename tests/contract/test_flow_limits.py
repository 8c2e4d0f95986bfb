"""Contract: rate limits, per-key concurrency and fair groups, enforced by the claim itself.

Every test drives ``broker.claim`` with a FakeClock; a backend that does not implement flow
control yet (no ``supports_flow``) refuses such tasks at enqueue with a ValidationError.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import (
    ConcurrencyLimit,
    Conveyor,
    FakeClock,
    JobState,
    RateLimit,
    ValidationError,
)
from conveyor.broker.base import Ack
from conveyor.errors import LeaseLost


def needs_flow(app: Conveyor) -> Conveyor:
    """``app``, or skip: its backend has no flow control yet (a plain function, not a fixture:
    tests/redis/test_cluster_contract.py copies only the test functions)."""
    if not getattr(app.broker, "supports_flow", False):
        pytest.skip(f"flow control is not implemented on {type(app.broker).__name__} yet")
    return app


def claim(app: Conveyor, clock: FakeClock, limit: int = 50, vt: float = 3600.0) -> Any:
    return app.broker.claim(["default"], clock.now(), limit=limit, visibility_timeout=vt)


def test_global_rate_limit_is_a_token_bucket(app: Conveyor, clock: FakeClock) -> None:
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.partner", rate_limit="2/s")
    def partner(i: int) -> None: ...

    for i in range(10):
        partner.enqueue(i)
    first = claim(flow_app, clock)
    assert [lease.job.args for lease in first] == [[0], [1]], "burst = the rate: 2 at once"
    empty = claim(flow_app, clock)
    assert empty == [] and empty.next_due == pytest.approx(clock.now() + 0.5, abs=1e-3)
    clock.advance(0.5)
    assert [lease.job.args for lease in claim(flow_app, clock)] == [[2]]
    clock.advance(10)  # a full bucket holds at most `burst` tokens
    assert len(claim(flow_app, clock)) == 2


def test_per_key_rate_limit_has_no_head_of_line_blocking(app: Conveyor, clock: FakeClock) -> None:
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.llm", rate_limit=RateLimit("1/m", key="customer_id", burst=1))
    def llm(customer_id: str, n: int) -> None: ...

    for n in range(5):
        llm.enqueue("a", n)
    llm.enqueue(customer_id="b", n=0)
    got = claim(flow_app, clock)
    customers = sorted((lease.job.args or [lease.job.kwargs["customer_id"]])[0] for lease in got)
    assert customers == ["a", "b"]
    assert claim(flow_app, clock) == []
    clock.advance(60)
    assert [lease.job.args for lease in claim(flow_app, clock)] == [["a", 1]]


def test_concurrency_limit_per_key_frees_on_completion_and_lease_expiry(
    app: Conveyor, clock: FakeClock
) -> None:
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.sync", concurrency=ConcurrencyLimit(1, key="account_id"))
    def sync(account_id: int, n: int) -> None: ...

    for n in range(3):
        sync.enqueue(1, n)
    sync.enqueue(2, 0)
    first = claim(flow_app, clock, vt=30)
    assert sorted(lease.job.args for lease in first) == [[1, 0], [2, 0]]
    assert claim(flow_app, clock) == [], "account 1 already runs one job"
    one = next(lease for lease in first if lease.job.args[0] == 1)
    assert flow_app.broker.complete([Ack(one.id, one.token)], clock.now()) == [True]
    second = claim(flow_app, clock, vt=30)
    assert [lease.job.args for lease in second] == [[1, 1]]
    clock.advance(31)  # the workers died: their slots free with their leases
    third = claim(flow_app, clock, vt=30)
    accounts = sorted(lease.job.args[0] for lease in third)
    assert accounts == [1, 2], "one job per account again, nothing stuck"
    assert flow_app.get_job(second[0].id).lost == 1


def test_fair_groups_round_robin(app: Conveyor, clock: FakeClock) -> None:
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.tenant", fair_by="tenant_id")
    def tenant(tenant_id: str, n: int) -> None: ...

    for n in range(300):
        tenant.enqueue("big", n)
    for n in range(10):
        tenant.enqueue("small", n)
    order = [claim(flow_app, clock, limit=1)[0].job.args[0] for _ in range(20)]
    assert order.count("small") == 10 and order[:2] == ["big", "small"]


def test_expired_grouped_job_never_runs(app: Conveyor, clock: FakeClock) -> None:
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.exp", fair_by="tenant_id")
    def exp(tenant_id: str) -> None: ...

    job = exp.options(expires_in=5).enqueue("t")
    clock.advance(6)
    assert claim(flow_app, clock) == []
    assert job.refresh().state is JobState.EXPIRED


def test_bad_limits_are_refused_by_name(app: Conveyor) -> None:
    with pytest.raises(ValidationError, match="rate_limit"):
        app.task(name="x1", rate_limit="ten per second")(lambda: None)
    with pytest.raises(ValidationError, match="concurrency"):
        app.task(name="x2", concurrency=0)(lambda: None)
    with pytest.raises(ValidationError, match="burst"):
        RateLimit("1/s", burst=0)

    @app.task(name="x3", rate_limit=RateLimit("1/s", key="missing"))
    def x3(a: int) -> None: ...

    with pytest.raises(ValidationError, match="missing"):
        x3.enqueue(1)

    @app.task(name="x4", concurrency=ConcurrencyLimit(1, key="account"))
    def x4(account: str) -> None: ...

    for hostile in ("a\nb", "{slot}", "x" * 300, "a|b"):
        with pytest.raises(ValidationError, match="account"):
            x4.enqueue(hostile)


def test_backends_without_flow_control_refuse_it(app: Conveyor) -> None:
    if getattr(app.broker, "supports_flow", False):
        pytest.skip("this backend implements flow control")

    @app.task(name="flow.refused", rate_limit="1/s")
    def refused() -> None: ...

    with pytest.raises(ValidationError, match="flow control"):
        refused.enqueue()


def test_grouped_jobs_are_counted_as_pending(app: Conveyor, clock: FakeClock) -> None:
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.counted", fair_by="tenant")
    def counted(tenant: str) -> None: ...

    jobs = [counted.enqueue(t) for t in ("a", "a", "b")]
    assert flow_app.stats()["queues"]["default"]["pending"] == 3
    assert flow_app.cancel(jobs[0].id)
    assert len(claim(flow_app, clock, limit=1)) == 1
    counts = flow_app.stats()["queues"]["default"]
    assert (counts["pending"], counts["active"], counts["cancelled"]) == (1, 1, 1)
    waiting = next(j for j in jobs if str(j.refresh().state) == "pending")
    assert flow_app.broker.delete_job(waiting.id, clock.now())
    assert flow_app.stats()["queues"]["default"]["pending"] == 0
    assert claim(flow_app, clock) == []


def test_a_stale_lease_never_frees_the_slot_of_the_new_one(app: Conveyor, clock: FakeClock) -> None:
    """The slot records its owner; a worker whose lease expired (the slot went to the next
    lease) cannot free the slot the new lease holds: cleanup is fenced."""
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.fence", concurrency=ConcurrencyLimit(1, key="account_id"))
    def fence(account_id: int, n: int) -> None: ...

    ids = {fence.enqueue(1, 0).id, fence.enqueue(1, 1).id}
    [old] = claim(flow_app, clock, vt=30)
    clock.advance(31)  # the first worker stalls past its lease: the slot goes to a new lease
    [new] = claim(flow_app, clock, vt=30)
    broker = flow_app.broker
    assert broker.complete([Ack(old.id, old.token)], clock.now()) == [False]
    with pytest.raises(LeaseLost):
        broker.fail(old.id, old.token, clock.now(), error={"kind": "error"}, retry_at=None)
    assert claim(flow_app, clock, vt=30) == [], "the slot is still the new lease's"
    assert broker.flow_status(clock.now())["running"] == {"conc:flow.fence:account_id=1": [new.id]}
    assert broker.complete([Ack(new.id, new.token)], clock.now()) == [True]
    [last] = claim(flow_app, clock, vt=30)
    assert {new.id, last.id} == ids
