"""A completion batch finds its rows by index whatever the statistics say (issue 17).

ANALYZE (autovacuum, on a busy table) usually runs while few jobs are running, so the planner
expects ONE active row. The completion's lock statement joined the acks to ``jobs`` on that
estimate: for a large batch the plan read the whole table and compared every row with every
ack (a nested loop with a join filter), 40 to 84 ms for 500 acks over 20,000 rows. The
statement now probes ``jobs_id_key`` once per ack (``finish._LOCK``). ``auto_explain`` records
the plan actually run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job

from .test_claim_plans import _EXPLAIN, _nodes, _plans


def test_a_large_completion_on_an_analyzed_table_probes_the_id_index(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_server.new_database()
    setup = PostgresBroker.from_url(url)
    now = time.time()
    jobs = [Job(id=f"p{i:06d}", task="t", created_at=now, run_at=now) for i in range(20000)]
    for i in range(0, len(jobs), 1000):
        setup.enqueue(jobs[i : i + 1000], now)
    setup.in_tx(lambda tx: tx.conn.execute("ANALYZE"))  # no job running: the usual statistics
    got = setup.claim(["default"], now, limit=500, visibility_timeout=60)
    setup.close()
    assert len(got) == 500
    log = Path(pg_server.dir) / "server.log"
    start = log.stat().st_size
    monkeypatch.setenv("PGOPTIONS", _EXPLAIN)
    explained = PostgresBroker.from_url(url)
    try:
        acks = [Ack(x.id, x.token) for x in got]
        acks.append(Ack(got[0].id, "stale-token"))  # a stale ack still finds nothing
        assert explained.complete(acks, time.time()) == [True] * 500 + [False]
    finally:
        explained.close()
    time.sleep(0.2)  # the server writes its log asynchronously to us
    locks = [p for p in _plans(log, start) if "unnest" in p.get("Query Text", "")]
    locks = [p for p in locks if "FOR UPDATE" in p["Query Text"] and "SKIP" not in p["Query Text"]]
    assert len(locks) == 1, [p["Query Text"][:80] for p in locks]
    nodes = _nodes(locks[0]["Plan"])
    on_jobs = [n for n in nodes if n.get("Relation Name") == "jobs"]
    assert on_jobs and all(n["Node Type"] == "Index Scan" for n in on_jobs), on_jobs
    assert {n.get("Index Name") for n in on_jobs} == {"jobs_id_key"}
    assert sum(n.get("Rows Removed by Join Filter", 0) for n in nodes) == 0
