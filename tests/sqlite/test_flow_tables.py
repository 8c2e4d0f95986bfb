"""SQLite flow-control tables after operator actions (issue 15): what ``clear_queue`` leaves.

The contract test (tests/contract/test_flow_admin.py) checks counts and ``flow_status``; this
one reads the tables: after a clear no group row of the queue is left (``flow_groups``,
``flow_waiters``), only the limiters' own state (buckets, the running job's slot).
"""

from __future__ import annotations

from conveyor.broker.sqlite import SqliteBroker
from tests.support.flow_backlog import T0, WAITING, grouped_backlog


def test_clear_leaves_no_group_rows(sbroker: SqliteBroker) -> None:
    grouped_backlog(sbroker)
    assert sbroker.clear_queue("default", T0) == WAITING
    rows = {
        table: sbroker._read(f"SELECT COUNT(*) FROM {table} WHERE queue = 'default'")[0][0]
        for table in ("flow_groups", "flow_waiters")
    }
    assert rows == {"flow_groups": 0, "flow_waiters": 0}
    assert sbroker._read("SELECT COUNT(*) FROM flow_slots")[0][0] == 3  # the running syncs
    assert sbroker._read("SELECT COUNT(*) FROM flow_groups WHERE queue = 'other'")[0][0] == 2
