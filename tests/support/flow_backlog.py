"""The shared setup of the flow-table tests (tests/test_memory_flow.py,
tests/sqlite/test_flow_tables.py, tests/postgres/test_flow_port.py): a queue whose jobs wait in
flow groups, parked behind concurrency slots or throttled by rate limits, so each test can
clear it and read what its backend's own limiter state keeps."""

from __future__ import annotations

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, RateLimit
from conveyor.broker.base import Broker

T0 = 1_700_000_000.0
#: The waiting jobs of ``default`` after ``grouped_backlog``: 60 enqueued, 8 leased.
WAITING = 60 - 8


def grouped_backlog(broker: Broker) -> Conveyor:
    """An app on ``broker`` at ``T0`` with, in ``default``, 30 ``t.sync`` jobs under
    ``ConcurrencyLimit(1)`` over 3 accounts and 30 ``t.call`` jobs under ``RateLimit("1/m")``
    over 5 customers, and 30 ``t.call`` jobs over 2 customers in ``other``. The first claim of
    ``default`` leased 8 (one per slot and per bucket, for 600 s); a second found nothing:
    every other group is parked (no free slot) or throttled (no token)."""
    app = Conveyor(broker, clock=FakeClock(T0))

    @app.task(name="t.sync", concurrency=ConcurrencyLimit(1, key="account"))
    def sync(account: int, i: int) -> None: ...

    @app.task(name="t.call", rate_limit=RateLimit("1/m", key="customer"))
    def call(customer: str, i: int) -> None: ...

    for i in range(30):
        sync.enqueue(i % 3, i)
        call.enqueue(f"c{i % 5}", i)
        app.enqueue("t.call", [f"other{i % 2}", i], queue="other")
    assert len(broker.claim(["default"], T0, limit=100, visibility_timeout=600)) == 8
    assert broker.claim(["default"], T0, limit=100) == []  # groups parked and throttled
    return app
