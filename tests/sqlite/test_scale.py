"""Size and speed at scale, checked structurally (never by timing): retention keeps the file
bounded under steady load, and the planner uses indexes for claim, housekeeping and search."""

from __future__ import annotations

import os
import random
import re
import sqlite3

import pytest

from conveyor.broker.base import Ack, SearchQuery
from conveyor.broker.sqlite import SqliteBroker
from conveyor.broker.sqlite_rows import NEXT_DUE
from conveyor.config import Retention
from conveyor.core.ids import new_ulid
from conveyor.core.job import Job
from conveyor.core.state import JobState

from .conftest import T0


def _size(path: str) -> int:
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))


def test_file_stays_bounded_under_steady_load(db_path: str) -> None:
    retention = Retention(completed_max=200, completed_ttl=3600, events_max=1000)
    broker = SqliteBroker(db_path, retention)
    rng = random.Random(6)
    now, sizes = T0, []
    for _ in range(20):
        batch = [
            Job(
                id=new_ulid(now, rng),
                task="t",
                args=[i, "x" * 200],
                run_at=now,
                created_at=now,
                idempotency_key=f"k{rng.random()}",
                idempotency_ttl=1.0,
            )
            for i in range(2000)
        ]
        broker.enqueue(batch, now)
        while leases := broker.claim(["default"], now, limit=250, worker_id="w"):
            assert all(broker.complete([Ack(x.id, x.token, {"ok": 1}) for x in leases], now))
        now += 2.0
        broker.reap_expired(now)
        broker._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # what autocheckpoint does
        sizes.append(os.path.getsize(db_path))
    counts = broker.counts()["default"]
    assert counts["completed"] == 200 and counts["pending"] == counts["active"] == 0
    raw = broker._conn()
    assert raw.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 200
    assert raw.execute("SELECT COUNT(*) FROM idem").fetchone()[0] == 0, "expired keys dropped"
    assert raw.execute("SELECT SUM(n) FROM events").fetchone()[0] <= 1000 + 2 * 500
    # freed pages are reused: after warm-up the file does not grow round over round
    assert max(sizes[5:]) <= sizes[4] * 1.2 + 256 * 1024, sizes
    assert sizes[-1] < 16 * 1024 * 1024, sizes
    broker.close()


N = 200_000
QUEUES, TASKS = 5, 10
BULK = f"""
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {N}),
rows AS (SELECT i, printf('J%09d', i) AS id, 'q' || (i % {QUEUES}) AS queue,
  't' || (i % {TASKS}) AS task,
  CASE WHEN i % 10 < 6 THEN 'completed' WHEN i % 10 < 8 THEN 'pending'
       WHEN i % 10 = 8 THEN 'dead_letter' WHEN i % 20 = 9 THEN 'scheduled' ELSE 'active' END
  AS state, {T0} + i AS t FROM n)
INSERT INTO jobs (id, queue, task, state, priority, seq, run_at, created_at, finished_at, due_at,
  lease_at, token, last_error, payload)
SELECT id, queue, task, state, i % 3, i, t, t,
  CASE WHEN state IN ('completed', 'dead_letter') THEN t END,
  CASE WHEN state = 'scheduled' THEN t + 1e6 END, CASE WHEN state = 'active' THEN t + 30 END,
  CASE WHEN state = 'active' THEN 'tok' END,
  CASE WHEN state = 'dead_letter' THEN 'ValueError: boom ' || i END,
  json_object('v', 1, 'id', id, 'task', task, 'queue', queue, 'state', state,
              'priority', i % 3, 'args', json_array(i, 'user-' || i), 'kwargs', json_object(),
              'run_at', t, 'created_at', t)
FROM rows
"""


def _plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> str:
    return "\n".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


FULL_SCAN = re.compile(r"\bSCAN jobs\b(?! USING)")


@pytest.mark.slow
def test_claim_and_search_use_indexes_at_200k_jobs(db_path: str) -> None:
    broker = SqliteBroker(db_path)
    conn = broker._conn()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(BULK)
    conn.execute(
        "INSERT INTO counts (queue, state, n) SELECT queue, state, COUNT(*) FROM jobs GROUP BY 1, 2"
    )
    conn.execute(f"UPDATE counts SET n = {N} WHERE queue = '' AND state = 'seq'")
    conn.execute("INSERT INTO queues (name) SELECT DISTINCT queue FROM jobs")
    conn.execute("COMMIT")
    cols = "rid, id, queue, task, state, priority, run_at, created_at, finished_at, last_error,"
    finished = "queue = ? AND state = ? AND finished_at IS NOT NULL"
    queries = {
        "claim": (
            f"SELECT {cols} payload FROM jobs WHERE queue = ? AND state = 'pending'"
            " ORDER BY priority, seq LIMIT ?",
            ("q1", 10),
        ),
        "promote": (
            f"SELECT {cols} payload FROM jobs WHERE due_at <= ? ORDER BY due_at, seq LIMIT ?",
            (T0, 10),
        ),
        "reap": (
            f"SELECT {cols} payload FROM jobs WHERE lease_at <= ? AND state = 'active'"
            " ORDER BY lease_at, seq LIMIT ?",
            (T0, 10_000),
        ),
        "next_due": (NEXT_DUE, ()),
        "lease": (
            f"SELECT {cols} payload FROM jobs WHERE id = ? AND state = 'active' AND token = ?",
            ("J000000009", "tok"),
        ),
        "cap": (
            f"DELETE FROM jobs WHERE rid IN (SELECT rid FROM jobs WHERE {finished}"
            " ORDER BY seq LIMIT ?)",
            ("q1", "completed", 5),
        ),
        "ttl": (
            f"DELETE FROM jobs WHERE {finished} AND seq < COALESCE((SELECT seq FROM jobs"
            f" WHERE {finished} AND finished_at > ? ORDER BY seq LIMIT 1), 99)",
            ("q1", "completed", "q1", "completed", T0),
        ),
        "oldest": (
            "SELECT MIN(run_at) FROM jobs WHERE queue = ? AND state = 'pending' AND run_at != 0",
            ("q1",),
        ),
    }
    truth = [
        conn.execute(f"SELECT COUNT(*) FROM jobs WHERE {w}").fetchone()[0]
        for w in (
            "1",
            "state = 'dead_letter'",
            "queue = 'q2'",
            "task = 't3'",
            "state = 'pending' AND queue = 'q1'",
            "task = 't8' AND state = 'dead_letter'",
        )
    ]
    captured: list[str] = []
    conn.set_trace_callback(captured.append)
    searches = [
        SearchQuery(),
        SearchQuery(state=JobState.DEAD_LETTER),
        SearchQuery(queue="q2"),
        SearchQuery(task="t3"),
        SearchQuery(state=JobState.PENDING, queue="q1"),
        SearchQuery(task="t8", state=JobState.DEAD_LETTER, page=3),
        SearchQuery(since=T0 + 1000, until=T0 + 2000),
        SearchQuery(id="J00001234"),
        SearchQuery(state=JobState.DEAD_LETTER, error="boom 199998"),
        SearchQuery(queue="q3", text="user-199993"),
    ]
    results = [broker.search(q) for q in searches]
    leases = broker.claim(["q1"], T0, limit=10, worker_id="w")
    conn.set_trace_callback(None)
    assert [p.total for p in results[:6]] == truth and min(truth) > 0
    assert results[7].items[0].id.startswith("J00001234") and results[8].total == 1
    assert results[9].total == 1 and len(leases) == 10
    traced = [s for s in captured if s.lstrip().upper().startswith("SELECT")]
    assert any("ORDER BY created_at DESC" in s for s in traced)
    for stats in ("heuristics", "ANALYZE statistics"):  # a user may run ANALYZE: still indexed
        for name, (sql, params) in queries.items():
            plan = _plan(conn, sql, params)
            assert not FULL_SCAN.search(plan), f"{name} scans the table ({stats}):\n{plan}"
            assert "USING" in plan, f"{name} ({stats}):\n{plan}"
        for sql in traced:  # the statements search() and claim() really ran, with their values
            plan = _plan(conn, sql)
            assert not FULL_SCAN.search(plan), f"full scan ({stats}):\n{sql}\n{plan}"
            if "FROM jobs WHERE 1 " not in sql:  # only the unfiltered listing walks an index
                assert "SCAN jobs" not in plan, f"index walk ({stats}):\n{sql}\n{plan}"
        conn.execute("ANALYZE")
    broker.close()
