"""A busy worker's claim is planned once per connection, not at every claim (issue 17).

The claim statement used to carry its batch size as a parameter (``LIMIT $n``). PostgreSQL
estimates a parameterised LIMIT at 10 % of the rows, so the generic plan looked far costlier
than a custom one (a hash join over all of ``jobs``) and the plan cache planned the statement
again at every execution: ~180 µs of server CPU per claim, 5.6 µs per job at the default batches
of 32 (``bench/pg_statements.py``). A batch of ``claim.LITERAL_SIZE`` (32, the worker's default)
now has its size written into the statement, whose generic plan is then the custom one, kept by
the plan cache after five custom ones. These tests read the plan cache of the broker's one
connection (``pg_prepared_statements``) and ``auto_explain``'s record of the generic plans.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job

from .test_claim_plans import _EXPLAIN, _nodes, _plans


def _fill(broker: PostgresBroker, n: int) -> None:
    now = time.time()
    jobs = [Job(id=f"p{i:06d}", task="t", created_at=now, run_at=now) for i in range(n)]
    for i in range(0, n, 1000):
        broker.enqueue(jobs[i : i + 1000], now)


def _drain(broker: PostgresBroker, cycles: int, limit: int = 32) -> None:
    for _ in range(cycles):
        got = broker.claim(["default"], time.time(), limit=limit, visibility_timeout=60)
        assert len(got) == limit
        assert all(broker.complete([Ack(x.id, x.token) for x in got], time.time()))


def _claim_plans(broker: PostgresBroker) -> list[tuple[str, int, int]]:
    """(statement, generic plans, custom plans) of the claim statements prepared on the
    broker's one connection."""
    rows = broker.in_tx(
        lambda tx: tx.conn.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall()
    )
    return [r for r in rows if "WITH picked AS" in r[0]]


def test_a_busy_claim_is_planned_once_not_per_claim(one: PostgresBroker) -> None:
    # a backlog of 20,000, analyzed (as autovacuum does): the parameterised LIMIT's 10 % made
    # the generic plan look costly
    _fill(one, 20000)
    one.in_tx(lambda tx: tx.conn.execute("ANALYZE"))
    _drain(one, 30)
    plans = _claim_plans(one)
    assert plans, "no claim statement prepared on the connection"
    custom = sum(r[2] for r in plans)
    generic = sum(r[1] for r in plans)
    # five custom plans per statement text, then its generic plan at every execution
    assert custom <= 5 * len(plans), plans
    assert generic >= 30 - custom, plans


def test_other_batch_sizes_share_one_text(one: PostgresBroker) -> None:
    # one text for every other size, one for 32: the prepared statements stay bounded
    _fill(one, 2000)
    for limit in (8, 31, 100, 101):
        _drain(one, 2, limit=limit)
    assert len(_claim_plans(one)) == 1
    _drain(one, 2, limit=32)
    texts = [r[0] for r in _claim_plans(one)]
    assert len(texts) == 2 and sum("LIMIT 32" in t for t in texts) == 1, texts


def test_the_generic_claim_plan_walks_the_ready_index_mid_drain(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a never-analyzed table, half drained: the state that once made the planner scan every
    # pending row; the generic plan (claims 6..12 on one connection) must not
    url = pg_server.new_database()
    broker = PostgresBroker.from_url(url)
    _fill(broker, 8000)
    _drain(broker, 4000 // 32)
    broker.close()
    log = Path(pg_server.dir) / "server.log"
    start = log.stat().st_size
    monkeypatch.setenv("PGOPTIONS", _EXPLAIN)
    explained = PostgresBroker.from_url(url + "?pool_size=1")
    try:
        _drain(explained, 12)
        generic = sum(r[1] for r in _claim_plans(explained))
    finally:
        explained.close()
    assert generic >= 6
    time.sleep(0.2)  # the server writes its log asynchronously to us
    claims = [p for p in _plans(log, start) if "WITH picked AS" in p.get("Query Text", "")]
    assert len(claims) >= 12, len(claims)
    for p in claims[-6:]:  # generic plans by then
        nodes = _nodes(p["Plan"])
        kinds = {n["Node Type"] for n in nodes if n.get("Relation Name") == "jobs"}
        assert not kinds & {"Bitmap Heap Scan", "Seq Scan"}, kinds
        joins = {n["Node Type"] for n in nodes} & {"Hash Join", "Merge Join"}
        assert not joins, p["Query Text"]
        picked = [n for n in nodes if n.get("Index Name") == "jobs_ready"]
        assert picked and all(n["Actual Rows"] <= 64 for n in picked), picked
        assert sum(n["Shared Hit Blocks"] for n in picked) < 200
        assert "jobs_state_created" not in json.dumps(p["Plan"])
