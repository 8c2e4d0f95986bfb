"""EXPLAIN (ANALYZE, BUFFERS) of the PostgreSQL claim, look-ups and searches at N jobs.

    PYTHONPATH=$PWD/src:. /work/main/.venv/bin/python bench/pg_explain_1m.py 1000000 [running]

Starts a private cluster (``tests/support/pg_proc.py``), creates the current schema, fills
``jobs`` with N rows in one ``INSERT … SELECT generate_series`` (20 queues, 50 tasks, five
states, as ``tests/postgres/test_vacuum_explain.py`` does at 30,000; given ``running``, only that
many stay active, the other active rows become completed: a realistic share), adds 2,500 jobs of
a task ``rare`` older than all of them, fills ``counts`` and ``queues`` as the broker keeps
them, ANALYZEs it, then runs
the claim's pick, the ``next_due`` look-ups and the SQL the broker's ``search`` sends for
each filter (captured from ``_read``) under ``EXPLAIN (ANALYZE, BUFFERS)``: per statement the
plan's scan nodes, the execution time and the buffers touched. Used for
docs/architecture-postgres.md ("EXPLAIN").
"""

from __future__ import annotations

import sys
import time
from typing import Any

import psycopg
from tests.postgres.test_search_plans import _RARE, RARE
from tests.postgres.test_vacuum_explain import _FILL
from tests.support.pg_proc import PgServer

from conveyor.broker.base import SearchQuery
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.state import JobState

S = "conveyor"
DIRECT = {
    "claim pick": (
        f"SELECT rid FROM {S}.jobs WHERE queue = 'q5' AND state = 'pending' AND grp IS NULL"
        " ORDER BY priority, seq LIMIT 10 FOR UPDATE SKIP LOCKED"
    ),
    "next_due": (
        f"SELECT (SELECT min(due_at) FROM {S}.jobs WHERE due_at IS NOT NULL),"
        f" (SELECT min(lease_at) FROM {S}.jobs WHERE lease_at IS NOT NULL)"
    ),
}
SEARCHES = {
    "search, no filter": SearchQuery(),
    "search, since": SearchQuery(since=1e9 + 990_000),
    "search, state dead_letter": SearchQuery(state=JobState.DEAD_LETTER),
    "search, state active": SearchQuery(state=JobState.ACTIVE),
    "search, queue": SearchQuery(queue="q7"),
    "search, queue + state pending": SearchQuery(queue="q7", state=JobState.PENDING),
    "search, task": SearchQuery(task="t9"),
    "search, task page 20": SearchQuery(task="t9", page=20),
    "search, task + state active": SearchQuery(task="t9", state=JobState.ACTIVE),
    "search, id prefix": SearchQuery(id="0000000000000000000001234"),
    # two or three filters; the fill's correlations make many of them match nothing
    "search, queue + state (none)": SearchQuery(queue="q7", state=JobState.PENDING),
    "search, queue + state (50,000)": SearchQuery(queue="q7", state=JobState.DEAD_LETTER),
    "search, task + queue (none)": SearchQuery(task="t9", queue="q7"),
    "search, task + queue (10,000)": SearchQuery(task="t9", queue="q9"),
    "search, task + state (none)": SearchQuery(task="t9", state=JobState.PENDING),
    "search, task + state (19,950)": SearchQuery(task="t9", state=JobState.COMPLETED),
    "search, queue + task + state (none)": SearchQuery(
        queue="q9", task="t9", state=JobState.PENDING
    ),
    "search, queue + since": SearchQuery(queue="q7", since=1e9 + 990_000),
    "search, task + since": SearchQuery(task="t9", since=1e9 + 990_000),
    "search, state + queue + since (none)": SearchQuery(
        state=JobState.PENDING, queue="q7", since=1e9 + 990_000
    ),
    "search, task + window (none)": SearchQuery(
        task="t9", since=1e9 + 500_000, until=1e9 + 500_005
    ),
    "search, id prefix + queue (none)": SearchQuery(id="00000000000000000001", queue="q1"),
    "search, rare task (2,500 oldest)": SearchQuery(task="rare"),
    "search, rare task page 20": SearchQuery(task="rare", page=20),
}
_COUNTS = (
    "INSERT INTO {S}.counts (queue, state, n) SELECT queue, state, count(*) FROM {S}.jobs"
    " GROUP BY queue, state ON CONFLICT (queue, state) DO UPDATE SET n = excluded.n;"
    " INSERT INTO {S}.queues (name) SELECT DISTINCT queue FROM {S}.jobs ON CONFLICT DO NOTHING"
)


def _scans(node: dict[str, Any]) -> list[str]:
    """The scan nodes of a plan: type and index (or relation)."""
    here = []
    if "Scan" in node["Node Type"]:
        here.append(f"{node['Node Type']} {node.get('Index Name') or node.get('Relation Name')}")
    for child in node.get("Plans", ()):
        here += _scans(child)
    return here


def explain(conn: Any, label: str, sql: str, params: Any = ()) -> None:
    """Print one statement's scans, execution time and buffers."""
    row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()
    top = row[0][0]
    plan = top["Plan"]
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    scans = "; ".join(dict.fromkeys(_scans(plan)))
    print(f"{label:32} {top['Execution Time']:8.2f} ms {buffers:6d} buf  {scans}", flush=True)


_FINISH = (
    "UPDATE {S}.jobs SET state = 'completed', lease_at = NULL, finished_at = created_at"
    " WHERE state = 'active' AND rid NOT IN (SELECT rid FROM {S}.jobs WHERE state = 'active'"
    " ORDER BY rid DESC LIMIT %s)"
)


def _captured(broker: PostgresBroker, query: SearchQuery) -> tuple[list[Any], Any]:
    """The statements ``broker.search(query)`` sends (schema bound, with their parameters)
    and its page."""
    seen: list[tuple[str, Any]] = []
    read = broker._read

    def capture(sql: str, params: Any = ()) -> list[Any]:
        seen.append((broker.sql(sql), params))
        return read(sql, params)

    broker._read = capture  # type: ignore[method-assign]
    try:
        return seen, broker.search(query)
    finally:
        broker._read = read  # type: ignore[method-assign]


def main(n: int, running: int | None) -> None:
    """Fill ``n`` jobs and EXPLAIN every query (see the module docstring)."""
    with PgServer() as server:
        broker = PostgresBroker.from_url(server.url)
        with psycopg.connect(server.url, autocommit=True) as c:
            t0 = time.perf_counter()
            c.execute(_FILL, (n,))
            if running is not None:
                c.execute(_FINISH.replace("{S}", S), (running,))
            c.execute(_RARE, (RARE,))  # a task older than every other job (see SEARCHES)
            c.execute(_COUNTS.replace("{S}", S))  # the totals by state / queue come from here
            c.execute(f"VACUUM ANALYZE {S}.jobs")
            print(
                f"filled {n:,} jobs ({running} running) in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            for label, sql in DIRECT.items():
                explain(c, label, sql)
            for label, query in SEARCHES.items():
                seen, found = _captured(broker, query)
                for i, (sql, params) in enumerate(seen):
                    part = "total" if i == 0 else "page"  # no page statement: nothing to show
                    explain(c, f"{label} ({part})", sql, params)
                print(f"{'':32} total {found.total:,}, {len(found.items)} on the page")
        broker.close()


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000,
        int(sys.argv[2]) if len(sys.argv) > 2 else None,
    )
