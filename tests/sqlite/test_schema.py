"""Schema versions: a new file gets the current one, an older file is migrated in place (rows
untouched), a newer or unknown one is refused with an error naming the rule."""

from __future__ import annotations

import random
import sqlite3

import pytest

from conveyor.broker.base import SearchQuery
from conveyor.broker.sqlite import SqliteBroker
from conveyor.broker.sqlite_schema import SCHEMA_VERSION
from conveyor.core.ids import new_ulid
from conveyor.core.job import Job
from conveyor.core.state import JobState
from conveyor.errors import BrokerUnavailable

from .conftest import T0

V1_SEARCH_INDEXES = {  # the version 1 search indexes, as version 1 created them
    "jobs_created": "(created_at, id)",
    "jobs_state_created": "(state, created_at, id)",
    "jobs_queue_created": "(queue, created_at, id)",
    "jobs_task_created": "(task, created_at, id)",
}
V2_COLUMNS = {
    "jobs_created": ["created_at"],
    "jobs_state_created": ["state", "created_at"],
    "jobs_queue_created": ["queue", "created_at"],
    "jobs_task_created": ["task", "created_at"],
}


def _columns(conn: sqlite3.Connection) -> dict[str, list[str]]:
    return {name: [r[2] for r in conn.execute(f"PRAGMA index_info({name})")] for name in V2_COLUMNS}


def _make_v1(path: str, n: int) -> list[str]:
    """A file as version 1 left it: v1 search indexes, user_version 1, ``n`` jobs."""
    rng, broker = random.Random(2), SqliteBroker(path)
    jobs = [
        Job(id=new_ulid(T0 + i, rng), task=f"t{i % 2}", args=[i], run_at=T0 + i, created_at=T0 + i)
        for i in range(n)
    ]
    broker.enqueue(jobs, T0)
    broker.close()
    with sqlite3.connect(path) as conn:
        _downgrade_to_v3(conn)
        for name, cols in V1_SEARCH_INDEXES.items():
            conn.execute(f"DROP INDEX {name}")
            conn.execute(f"CREATE INDEX {name} ON jobs {cols}")
        conn.execute("PRAGMA user_version = 1")
    return [j.id for j in jobs]


def test_new_file_gets_the_current_version(db_path: str) -> None:
    broker = SqliteBroker(db_path)
    conn = broker._conn()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    assert _lease_index(conn)
    assert _columns(conn) == V2_COLUMNS
    broker.close()


def test_version_1_file_is_migrated_in_place(db_path: str) -> None:
    ids = _make_v1(db_path, 50)
    broker = SqliteBroker(db_path)
    conn = broker._conn()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert _columns(conn) == V2_COLUMNS
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    page = broker.search(SearchQuery(task="t1", page_size=100))
    assert [j.id for j in page.items] == ids[1::2][::-1] and page.total == 25
    assert broker.counts()["default"][str(JobState.PENDING)] == 50
    assert _lease_index(conn)
    broker.close()
    SqliteBroker(db_path).close()  # a second open finds the current version: nothing to do


def _lease_index(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'jobs_lease'").fetchone())


def test_version_2_file_gets_the_lease_index(db_path: str) -> None:
    """Version 3 adds jobs_lease: every claim looks for expired leases through it."""
    broker = SqliteBroker(db_path)
    broker.enqueue([Job(id="j1", task="t", run_at=T0, created_at=T0)], T0)
    broker.claim(["default"], T0, visibility_timeout=5)
    broker.close()
    with sqlite3.connect(db_path) as conn:
        _downgrade_to_v3(conn)
        conn.execute("DROP INDEX jobs_lease")
        conn.execute("PRAGMA user_version = 2")
    broker = SqliteBroker(db_path)
    conn = broker._conn()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5 and _lease_index(conn)
    again = broker.claim(["default"], T0 + 6, visibility_timeout=5)  # the lease expired
    assert [lease.id for lease in again] == ["j1"] and again[0].job.lost == 1


FLOW_TABLES = ("flow_groups", "flow_buckets", "flow_slots", "flow_waiters", "flow_limits")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _drop_flow_control(conn: sqlite3.Connection) -> None:
    """Take flow control (issue 15, version 5) out of a current file."""
    for table in FLOW_TABLES:
        conn.execute(f"DROP TABLE {table}")
    conn.execute("DROP INDEX jobs_ready")
    conn.execute("DROP INDEX jobs_group")
    conn.execute("ALTER TABLE jobs DROP COLUMN grp")
    conn.execute(
        "CREATE INDEX jobs_ready ON jobs (queue, priority, seq, run_at) WHERE state = 'pending'"
    )


def _downgrade_to_v3(conn: sqlite3.Connection) -> None:
    """Turn a current file into the version 3 layout (no workflows, no flow control)."""
    _drop_flow_control(conn)
    conn.execute("DROP TABLE wf_nodes")
    conn.execute("DROP TABLE wf_edges")
    conn.execute("PRAGMA user_version = 3")


def _assert_flow_control_works(broker: SqliteBroker, old: str) -> None:
    """A rate-limited group claims one job, then is throttled; ``old`` (ungrouped) still runs."""
    flow = {"g": "rate:t", "r": [["rate:t", 1.0, 60.0, 1.0]]}
    grouped = [Job(id=f"g{i}", task="t", run_at=T0, created_at=T0, flow=flow) for i in range(2)]
    broker.enqueue(grouped, T0)
    # leases longer than the token wait: the next due time is the token, not a lease expiry
    claimed = broker.claim(["default"], T0, limit=10, visibility_timeout=600)
    assert sorted(lease.id for lease in claimed) == ["g0", old], "one token, then throttled"
    assert broker.claim(["default"], T0, limit=10).next_due == pytest.approx(T0 + 60, abs=1e-3)


def test_version_3_file_gets_workflows_and_flow_control(db_path: str) -> None:
    """3 -> 4 adds wf_nodes/wf_edges (issue 16), 4 -> 5 jobs.grp and the flow tables (issue 15)."""
    broker = SqliteBroker(db_path)
    broker.enqueue([Job(id="old", task="t", run_at=T0, created_at=T0)], T0)
    broker.close()
    with sqlite3.connect(db_path) as conn:
        _downgrade_to_v3(conn)
        assert not {"wf_nodes", "flow_groups"} & _tables(conn)
    broker = SqliteBroker(db_path)
    conn = broker._conn()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    assert {"wf_nodes", "wf_edges", *FLOW_TABLES} <= _tables(conn)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert broker.workflow_jobs("nope") == []
    _assert_flow_control_works(broker, "old")
    broker.close()


def test_version_4_workflow_file_gets_flow_control(db_path: str) -> None:
    """A version 4 file (workflows, no flow control) gets only the 4 -> 5 step."""
    broker = SqliteBroker(db_path)
    broker.enqueue([Job(id="old", task="t", run_at=T0, created_at=T0)], T0)
    broker.close()
    with sqlite3.connect(db_path) as conn:
        _drop_flow_control(conn)
        conn.execute("PRAGMA user_version = 4")
    broker = SqliteBroker(db_path)
    conn = broker._conn()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    assert {"wf_nodes", "wf_edges", *FLOW_TABLES} <= _tables(conn)
    _assert_flow_control_works(broker, "old")
    broker.close()


def test_version_4_flow_control_test_file_gets_the_workflow_tables(db_path: str) -> None:
    """The flow-control branch also called its layout version 4 (never released): 4 -> 5 is
    idempotent and adds the workflow tables it lacks."""
    broker = SqliteBroker(db_path)
    broker.enqueue([Job(id="j1", task="t", run_at=T0, created_at=T0)], T0)
    broker.close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("DROP TABLE wf_nodes")
        conn.execute("DROP TABLE wf_edges")
        conn.execute("PRAGMA user_version = 4")
    broker = SqliteBroker(db_path)
    conn = broker._conn()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    assert {"wf_nodes", "wf_edges", *FLOW_TABLES} <= _tables(conn)
    assert broker.get("j1") is not None and broker.workflow_jobs("nope") == []
    broker.close()


@pytest.mark.parametrize("version", [6, 99, -1])
def test_newer_or_unknown_versions_are_refused(db_path: str, version: int) -> None:
    SqliteBroker(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {version}")
    with pytest.raises(BrokerUnavailable, match=f"schema version {version} .*newer Conveyor"):
        SqliteBroker(db_path)
