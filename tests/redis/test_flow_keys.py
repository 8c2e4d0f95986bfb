"""Redis flow-control keys after operator actions (issue 15): what ``clear_queue`` leaves.

The contract test (tests/contract/test_flow_admin.py) checks the counts and ``flow_status``;
this one reads the keys: after a clear no group key is left (f:g:*, f:groups, f:gdelay,
f:parked, f:why, f:wait:*, f:npend), only the limiters' own state (buckets, the running job's
slot).
"""

from __future__ import annotations

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, RateLimit
from conveyor.broker.redis import RedisBroker

T0 = 1_700_000_000.0


def test_clear_leaves_no_group_keys(rbroker: RedisBroker) -> None:
    clock = FakeClock(T0)
    app = Conveyor(rbroker, clock=clock)

    @app.task(name="t.sync", concurrency=ConcurrencyLimit(1, key="account"))
    def sync(account: int, i: int) -> None: ...

    @app.task(name="t.call", rate_limit=RateLimit("1/m", key="customer"))
    def call(customer: str, i: int) -> None: ...

    @app.task(name="t.fair", fair_by="tenant")
    def fair(tenant: str, i: int) -> None: ...

    for i in range(1500):  # more than one clear batch (PURGE_BATCH)
        sync.enqueue(i % 3, i)
        call.enqueue(f"c{i % 5}", i)
    assert len(rbroker.claim(["default"], T0, limit=100, visibility_timeout=600)) == 8
    for i in range(300):
        fair.enqueue(f"t{i % 7}", i)
    prefix = rbroker.keys.flow("default", "")
    before = {k.decode()[len(prefix) :] for k in rbroker.client.scan_iter(match=prefix + "*")}
    assert {"groups", "gdelay", "parked", "why", "npend"} <= before

    assert rbroker.clear_queue("default", T0) == 3000 + 300 - 8
    left = {k.decode()[len(prefix) :] for k in rbroker.client.scan_iter(match=prefix + "*")}
    assert all(k.startswith(("tb:", "slot:")) for k in left), sorted(left)
    assert len([k for k in left if k.startswith("slot:")]) == 3  # the 3 running syncs
    assert rbroker.counts()["default"]["pending"] == 0
