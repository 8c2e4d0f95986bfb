"""SQLite flow-control tables after operator actions (issue 15): what ``clear_queue`` leaves.

The contract test (tests/contract/test_flow_admin.py) checks counts and ``flow_status``; this
one reads the tables: after a clear no group row of the queue is left (``flow_groups``,
``flow_waiters``), only the limiters' own state (buckets, the running job's slot).
"""

from __future__ import annotations

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, RateLimit
from conveyor.broker.sqlite import SqliteBroker

T0 = 1_700_000_000.0


def test_clear_leaves_no_group_rows(sbroker: SqliteBroker) -> None:
    app = Conveyor(sbroker, clock=FakeClock(T0))

    @app.task(name="t.sync", concurrency=ConcurrencyLimit(1, key="account"))
    def sync(account: int, i: int) -> None: ...

    @app.task(name="t.call", rate_limit=RateLimit("1/m", key="customer"))
    def call(customer: str, i: int) -> None: ...

    for i in range(30):
        sync.enqueue(i % 3, i)
        call.enqueue(f"c{i % 5}", i)
        app.enqueue("t.call", [f"other{i % 2}", i], queue="other")
    assert len(sbroker.claim(["default"], T0, limit=100, visibility_timeout=600)) == 8
    assert sbroker.claim(["default"], T0, limit=100) == []  # groups parked and throttled
    assert sbroker.clear_queue("default", T0) == 60 - 8
    rows = {
        table: sbroker._read(f"SELECT COUNT(*) FROM {table} WHERE queue = 'default'")[0][0]
        for table in ("flow_groups", "flow_waiters")
    }
    assert rows == {"flow_groups": 0, "flow_waiters": 0}
    assert sbroker._read("SELECT COUNT(*) FROM flow_slots")[0][0] == 3  # the running syncs
    assert sbroker._read("SELECT COUNT(*) FROM flow_groups WHERE queue = 'other'")[0][0] == 2
