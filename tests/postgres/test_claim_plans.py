"""The claim's cost does not grow with the backlog or with the jobs already drained.

Every statement of one claim transaction is captured by ``auto_explain`` (JSON, buffers) on a
fresh, never-analyzed table in the middle of a drain: the state in which the planner, with no
statistics, once picked a bitmap scan of every pending row plus a sort, and the expired-lease
look-up read the dead index entries of every job claimed so far.
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

_EXPLAIN = (
    "-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0"
    " -c auto_explain.log_analyze=on -c auto_explain.log_buffers=on"
    " -c auto_explain.log_format=json"
)


def _plans(log: Path, start: int) -> list[dict[str, Any]]:
    """The JSON plans auto_explain logged after byte ``start`` of the server log."""
    text = log.read_text(errors="replace")[start:]
    out = []
    for chunk in text.split("plan:")[1:]:
        body = chunk[: chunk.find("\n20")] if "\n20" in chunk else chunk
        try:
            out.append(json.loads(body))
        except json.JSONDecodeError:
            continue
    return out


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found, todo = [], [plan]
    while todo:
        node = todo.pop()
        found.append(node)
        todo.extend(node.get("Plans", []))
    return found


def test_a_claim_mid_drain_walks_the_ready_index_and_reads_little(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_server.new_database()
    broker = PostgresBroker.from_url(url)
    now = time.time()
    jobs = [Job(id=f"p{i:06d}", task="t", created_at=now, run_at=now) for i in range(8000)]
    for i in range(0, len(jobs), 1000):
        broker.enqueue(jobs[i : i + 1000], now)
    for _ in range(4000 // 32):  # half the backlog claimed and completed
        got = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
        assert broker.complete([Ack(lease.id, lease.token) for lease in got], time.time())
    broker.close()

    log = Path(pg_server.dir) / "server.log"
    start = log.stat().st_size
    monkeypatch.setenv("PGOPTIONS", _EXPLAIN)
    explained = PostgresBroker.from_url(url)
    got = explained.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    explained.close()
    assert len(got) == 32
    time.sleep(0.2)  # the server writes its log asynchronously to us
    plans = [p for p in _plans(log, start) if "jobs" in p.get("Query Text", "")]
    claim = [p for p in plans if "FOR UPDATE SKIP LOCKED" in p["Query Text"]]
    assert claim, "the claim statement was not logged"
    for p in plans:
        kinds = {n["Node Type"] for n in _nodes(p["Plan"]) if n.get("Relation Name") == "jobs"}
        assert not kinds & {"Bitmap Heap Scan", "Seq Scan"}, (p["Query Text"], kinds)
        assert "jobs_state_created" not in json.dumps(p["Plan"]), p["Query Text"]
    # 32 rows read in index order: a few hundred buffers, not a pass over 4,000 pending rows
    picked = [n for p in claim for n in _nodes(p["Plan"]) if n.get("Index Name") == "jobs_ready"]
    assert picked and all(n["Actual Rows"] <= 64 for n in picked), picked
    assert sum(n["Shared Hit Blocks"] for n in picked) < 200
