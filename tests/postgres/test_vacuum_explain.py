"""Vacuum-friendliness and index use of the PostgreSQL backend, at modest scale.

* EXPLAIN: the claim, the due/lease look-ups and every indexed search filter use an index (no
  sequential scan of ``jobs``) on 30,000 jobs with fresh statistics.
* A long-running transaction (an old snapshot) keeps every dead row version of the churn alive:
  VACUUM cannot remove them until it ends; claims keep working with bounded latency meanwhile,
  and once the transaction ends one VACUUM reclaims them. docs/architecture-postgres.md.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import orjson
import psycopg
import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job

pytestmark = pytest.mark.timeout(240)

_FILL = """
INSERT INTO conveyor.jobs (id, queue, task, state, priority, seq, run_at, created_at,
  finished_at, due_at, lease_at, payload)
SELECT lpad(g::text, 26, '0'), 'q' || (g %% 20), 't' || (g %% 50),
  (ARRAY['pending','completed','dead_letter','scheduled','active'])[1 + g %% 5], g %% 3,
  nextval('conveyor.job_seq'), 1e9 + g, 1e9 + g,
  CASE WHEN g %% 5 IN (1, 2) THEN 1e9 + g END, CASE WHEN g %% 5 = 3 THEN 2e9 + g END,
  CASE WHEN g %% 5 = 4 THEN 2e9 + g END, '{}'::bytea
FROM generate_series(1, %s) g
"""


def plan(conn: Any, sql: str, params: Any = ()) -> str:
    """The JSON plan of ``sql`` as text (index names and node types appear in it)."""
    rows = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()[0]
    return orjson.dumps(rows).decode()


def test_claim_and_search_use_their_indexes(pg: PostgresBroker, pg_server: Any) -> None:
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        c.execute(_FILL, (30_000,))
        c.execute("ANALYZE conveyor.jobs")
        s = "conveyor"
        cases = {
            "jobs_ready": (
                f"SELECT rid FROM {s}.jobs WHERE queue = 'q5' AND state = 'pending'"
                " AND grp IS NULL ORDER BY priority, seq LIMIT 10 FOR UPDATE SKIP LOCKED"
            ),
            "jobs_group": (  # a flow group's head (issue 15; broker/sqllimits.py)
                f"SELECT rid FROM {s}.jobs WHERE queue = 'q5' AND grp = 'g1' AND state ="
                " 'pending' ORDER BY priority, seq LIMIT 1 FOR UPDATE SKIP LOCKED"
            ),
            "jobs_due": f"SELECT min(due_at) FROM {s}.jobs WHERE due_at IS NOT NULL",
            "jobs_lease": f"SELECT min(lease_at) FROM {s}.jobs WHERE lease_at IS NOT NULL",
            "jobs_state_created": (
                f"SELECT rid FROM {s}.jobs WHERE state = 'dead_letter'"
                " ORDER BY created_at DESC, id DESC LIMIT 50"
            ),
            "jobs_queue_created": (
                f"SELECT rid FROM {s}.jobs WHERE queue = 'q7' AND state <> 'active'"
                " ORDER BY created_at DESC,"
                " id DESC LIMIT 50"
            ),
            "jobs_task_created": (
                f"SELECT rid FROM {s}.jobs WHERE task = 't9' AND state <> 'active'"
                " ORDER BY created_at DESC,"
                " id DESC LIMIT 50"
            ),
            "jobs_created": (
                f"SELECT rid FROM {s}.jobs WHERE created_at >= 1000029000"
                " AND state <> 'active' ORDER BY created_at DESC, id DESC LIMIT 50"
            ),
            "jobs_id_key": (
                f"SELECT rid FROM {s}.jobs WHERE id >= '0000000000000000000001234'"
                " AND id < '0000000000000000000001234' || chr(1114111)"
            ),
        }
        # the searches as reads._matching sends them: running jobs (read through jobs_lease)
        # apart, so the partial search indexes apply (schema versions 4 and 6)
        for index, sql in cases.items():
            text = plan(c, sql)
            assert "Seq Scan" not in text, (index, text)
            # The searches may walk another created_at index backwards (LIMIT 50 of a common
            # value): the planner's choice; the claim and the due/lease/id look-ups are fixed.
            if index in ("jobs_ready", "jobs_group", "jobs_due", "jobs_lease", "jobs_id_key"):
                assert index in text, (index, text)
            else:
                assert "jobs_" in text and "Index" in text, (index, text)


def _churn(pg: PostgresBroker, n: int, tag: str) -> list[float]:
    """Enqueue, claim and complete ``n`` jobs; the claim latencies (s)."""
    now = time.time()
    latencies: list[float] = []
    for start in range(0, n, 500):
        pg.enqueue(
            [Job(id=f"{tag}{i:08d}", task="t", run_at=now, created_at=now)
             for i in range(start, min(n, start + 500))],
            now,
        )  # fmt: skip
        while True:
            t0 = time.perf_counter()
            leases = pg.claim(["default"], time.time(), limit=50, worker_id="w")
            latencies.append(time.perf_counter() - t0)
            if not leases:
                break
            pg.complete([Ack(lease.id, lease.token) for lease in leases], time.time())
    return latencies


def _dead(conn: Any) -> int:
    conn.execute("VACUUM conveyor.jobs")
    row = conn.execute(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'conveyor'"
        " AND relname = 'jobs'"
    ).fetchone()
    return int(row[0])


def test_a_long_transaction_pins_dead_rows_until_it_ends(
    pg: PostgresBroker, pg_server: Any
) -> None:
    baseline = statistics.median(_churn(pg, 500, "a"))
    with (
        psycopg.connect(pg_server.url, autocommit=True) as admin,
        psycopg.connect(pg_server.url) as old,
    ):
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT count(*) FROM conveyor.jobs").fetchone()  # takes the snapshot
        latencies = _churn(pg, 3000, "b")
        pinned = _dead(admin)
        old.rollback()
        after = _dead(admin)
    held = statistics.median(latencies)
    print(
        f"dead rows kept by the open transaction: {pinned}, after it ended: {after};"
        f" claim p50 {baseline * 1e3:.1f} ms before, {held * 1e3:.1f} ms during,"
        f" max {max(latencies) * 1e3:.1f} ms"
    )
    assert pinned >= 3000  # every completed job left dead versions VACUUM could not remove
    assert after < pinned // 10  # reclaimed by one VACUUM once the snapshot is gone
    assert held < 0.5  # claims kept working (generous: shared 2-core machine)
