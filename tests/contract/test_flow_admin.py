"""Contract: operator actions meet flow control (issue 15) on every backend that enforces it.

``clear_queue`` deletes the jobs waiting in flow groups too (fair, concurrency and rate-limited
groups, throttled or parked), the counts agree, and no group is left behind. ``flow_set_limit``
is atomic with claims: limit changes racing claims never strand a group (every waiting job
is still claimed once the limits allow).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, RateLimit
from conveyor.broker.base import Ack
from tests.contract.test_flow_limits import needs_flow
from tests.support.flowcount import groups_looked_at


def _claim(app: Conveyor, now: float, limit: int = 50, vt: float = 3600) -> Any:
    return app.broker.claim(["default"], now, limit=limit, visibility_timeout=vt)


VT = 1e6  # no lease expires here: an expired lease would put its group back in line


def _register(app: Conveyor) -> tuple[Any, Any, Any]:
    @app.task(name="flow.fair", fair_by="tenant")
    def fair(tenant: str, i: int) -> None: ...

    @app.task(name="flow.sync", concurrency=ConcurrencyLimit(1, key="account"))
    def sync(account: int, i: int) -> None: ...

    @app.task(name="flow.call", rate_limit=RateLimit("1/m", key="customer"))
    def call(customer: str, i: int) -> None: ...

    @app.task(name="plain")
    def plain(i: int) -> None: ...

    return fair, sync, call


def test_clear_queue_removes_jobs_waiting_in_flow_groups(app: Conveyor, clock: FakeClock) -> None:
    flow_app = needs_flow(app)
    fair, sync, call = _register(flow_app)
    for i in range(3):
        sync.enqueue(42, i)
        for customer in ("a", "b"):
            call.enqueue(customer, i)
    running = _claim(flow_app, clock.now())  # one sync (the group parks), one call per customer
    assert len(running) == 3
    assert _claim(flow_app, clock.now()) == []  # every group now throttled or parked
    for i in range(3):
        for tenant in ("x", "y"):
            fair.enqueue(tenant, i)  # groups in line, never served
        flow_app.enqueue("plain", [i])
    counts = flow_app.broker.counts()["default"]
    assert counts["pending"] == 2 + 4 + 6 + 3 and counts["active"] == 3

    assert flow_app.broker.clear_queue("default", clock.now()) == 15
    counts = flow_app.broker.counts()["default"]
    assert counts["pending"] == 0 and counts["active"] == 3
    status = flow_app.broker.flow_status(clock.now())
    assert status["groups"] == []
    assert set(status["running"]) == {"conc:flow.sync:account=42"}  # the running job's slot
    clock.advance(600)  # tokens back, leases still held: nothing left to claim
    assert _claim(flow_app, clock.now()) == []
    assert flow_app.broker.clear_queue("default", clock.now()) == 0

    acks = [Ack(lease.id, lease.token) for lease in running]
    assert flow_app.broker.complete(acks, clock.now()) == [True, True, True]
    fresh = [sync.enqueue(42, 9), fair.enqueue("x", 9), call.enqueue("a", 9)]
    assert sorted(lease.id for lease in _claim(flow_app, clock.now())) == sorted(
        h.id for h in fresh
    )
    assert flow_app.broker.counts()["default"]["pending"] == 0


def test_limit_changes_racing_claims_strand_no_group(app: Conveyor, clock: FakeClock) -> None:
    """Claims throttle groups while an operator flips the limit: with the change not atomic
    with the claim, a group throttled in between was dropped from every list and its jobs
    never ran."""
    flow_app = needs_flow(app)

    @flow_app.task(name="flow.race", rate_limit=RateLimit("1/s", key="k"))
    def race(k: int, i: int) -> None: ...

    jobs = {race.enqueue(k, i).id for k in range(40) for i in range(3)}
    claimed: set[str] = set()
    stop = threading.Event()
    t0 = clock.now()

    def claimer() -> None:
        step = 0
        while not stop.is_set():
            step += 1
            leases = _claim(flow_app, t0 + step * 0.02, limit=8, vt=VT)
            claimed.update(lease.id for lease in leases)

    thread = threading.Thread(target=claimer)
    thread.start()
    try:
        for j in range(300):
            flow_app.broker.flow_set_limit("rate:flow.race", [2.0, 1.0, 1.0] if j % 2 else None)
    finally:
        stop.set()
        thread.join(timeout=60)
    flow_app.broker.flow_set_limit("rate:flow.race", None)
    for step in range(10):  # a token per group every second: three jobs each
        leases = _claim(flow_app, t0 + 10_000 + step * 10, limit=500, vt=VT)
        claimed.update(lease.id for lease in leases)
    assert claimed == jobs, f"{len(jobs - claimed)} jobs stranded"
    assert flow_app.broker.flow_status(t0 + 20_000)["groups"] == []


def test_an_expired_grouped_job_is_requeued_into_its_group(app: Conveyor, clock: FakeClock) -> None:
    """Expired jobs are requeueable like dead letters, flow-controlled ones included: the
    requeued job waits in its group again and its limits still apply."""
    flow_app = needs_flow(app)
    _, sync, _ = _register(flow_app)
    late = sync.options(expires_in=5).enqueue(42, 0)
    clock.advance(6)
    assert _claim(flow_app, clock.now()) == []
    assert flow_app.get_job(late.id).state.value == "expired"
    assert flow_app.broker.flow_status(clock.now())["running"] == {}, "it never took a slot"
    assert flow_app.requeue_dead(late.id)
    sync.enqueue(42, 1)
    [lease] = _claim(flow_app, clock.now())
    assert lease.id == late.id, "back in its group, first in line"
    assert _claim(flow_app, clock.now()) == [], "its concurrency limit still applies"


GROUPS = 300


def test_an_exhausted_queue_limit_does_not_make_claims_touch_every_group(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue limit binds every group of the queue (the LLM recipe: a provider limit over
    per-customer buckets). Once its bucket is empty nothing in the queue can start before the
    next token, so a claim sets one group aside and stops, instead of throttling every group:
    a claim at each token looks at a few groups, not all of them (counted, not timed: a wall
    time comparison flaked under load)."""
    flow_app = needs_flow(app)
    flow_app.queue("llm", rate_limit="1/m")

    @flow_app.task(name="flow.llm", rate_limit=RateLimit("100/s", key="customer"))
    def llm(customer: int) -> None: ...

    flow_app.enqueue_many([llm.options(queue="llm").spec(c) for c in range(GROUPS)])
    # a head asks two buckets on Redis (its customer's and the queue's): 3 HMGETs a group
    looked = groups_looked_at(flow_app, monkeypatch, hmgets_per_group=3)
    now = clock.now()
    got = flow_app.broker.claim(["llm"], now, limit=100, visibility_timeout=6000)
    assert len(got) == 1, "one token in the queue's bucket"
    empty = flow_app.broker.claim(["llm"], now, limit=100, visibility_timeout=6000)
    assert empty == [] and empty.next_due == pytest.approx(now + 60, abs=1e-3)
    per_claim = [looked()]  # the first two claims: the token taken, then the bucket empty
    for _ in range(5):
        clock.advance(60)
        before = looked()
        got = flow_app.broker.claim(["llm"], clock.now(), limit=100, visibility_timeout=6000)
        per_claim.append(looked() - before)
        assert len(got) == 1, "one token in the queue's bucket"
    assert max(per_claim) <= 5, (per_claim, GROUPS)
