"""Every filter combination the dashboard and ``conveyor jobs`` offer (state, queue, task, id
prefix, time range) answers from an index with a bounded read, including when nothing matches
(issue 17: "search indexes checked with EXPLAIN at 1M jobs").

The table holds 150,000 jobs (``_FILL``: 20 queues, 50 tasks, five states, correlated so that
many two-filter combinations match nothing: queue ``q7`` has no ``pending`` job, task ``t9``
never runs on ``q7``; 100 of them running, the other active rows completed; 2,500 older jobs
of a task ``rare``), ANALYZEd, with
``counts`` filled as the broker keeps it. Each statement
``search`` sends is run under ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)``: no sequential scan of
``jobs``, no scan of ``jobs_created`` for two or more of state / queue / task / id without a
time window (a window bounds that index's range), and at most ``BOUND`` buffers per statement
on the first page (walking ``jobs_created`` to the end reads ~3,400 here, as it read 34,450 at
1M before schema version 5).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor.broker.base import SearchQuery
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.broker.postgres.reads import GATHER
from conveyor.core.state import JobState

from .test_vacuum_explain import _FILL

#: every active row but the newest ``%s`` becomes completed (a realistic share of running jobs)
_FINISH = (
    "UPDATE {S}.jobs SET state = 'completed', lease_at = NULL, finished_at = created_at"
    " WHERE state = 'active' AND rid NOT IN (SELECT rid FROM {S}.jobs WHERE state = 'active'"
    " ORDER BY rid DESC LIMIT %s)"
)
RUNNING = 100
#: a task with more jobs than ``GATHER``, all older than every other job: a walk of
#: ``jobs_created`` newest first would pass every other row before meeting one
_RARE = (
    "INSERT INTO conveyor.jobs (id, queue, task, state, priority, seq, run_at, created_at,"
    " finished_at, payload) SELECT 'rare' || lpad(g::text, 8, '0'), 'q1', 'rare', 'completed',"
    " 0, nextval('conveyor.job_seq'), 1e8 + g, 1e8 + g, 1e8 + g, '{}'::bytea"
    " FROM generate_series(1, %s) g"
)
RARE = 2_500

N = 150_000  # each task 3,000 jobs: more than GATHER, so a task search walks an index
T0 = 1e9
BOUND = 400  # buffers per statement (the largest legitimate read here is a 2,000-row total)
#: values that match many rows together, and values whose combinations match nothing
MATCH = {"state": JobState.DEAD_LETTER, "queue": "q7", "task": "t17"}
NONE = {"state": JobState.PENDING, "queue": "q7", "task": "t9"}
TIME = {"since": T0 + N / 2, "until": T0 + N / 2 + 2_000}
ID = "000000000000000000000123"


def _queries() -> Iterator[tuple[str, SearchQuery]]:
    """Every non-empty combination of state, queue, task, time range and id prefix, with
    values that match and values that match nothing; and deep pages."""
    fields = ("state", "queue", "task", "time", "id")
    for k in range(1, len(fields) + 1):
        for combo in itertools.combinations(fields, k):
            for name, values in (("match", MATCH), ("none", NONE)):
                if name == "none" and len(set(combo) & {"state", "queue", "task"}) < 2:
                    continue  # a single equality filter always matches here
                kw: dict[str, Any] = {f: values[f] for f in combo if f in values}
                if "time" in combo:
                    kw |= TIME
                if "id" in combo:
                    kw["id"] = ID
                yield f"{'+'.join(combo)} ({name})", SearchQuery(**kw)
    yield "task, page 20", SearchQuery(task="t17", page=20)
    yield "queue + state, page 20", SearchQuery(queue="q7", state=JobState.DEAD_LETTER, page=20)
    yield "rare task, oldest jobs", SearchQuery(task="rare")
    yield "rare task, oldest jobs, with its queue", SearchQuery(task="rare", queue="q1")
    yield "no filter", SearchQuery()
    yield "state active", SearchQuery(state=JobState.ACTIVE)


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _walk(child)


@pytest.fixture(scope="module")
def filled(pg_server: Any) -> Iterator[tuple[PostgresBroker, Any]]:
    broker = PostgresBroker.from_url(pg_server.url)
    broker.flush_all()
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        c.execute(_FILL, (N,))
        c.execute(_FINISH.replace("{S}", "conveyor"), (RUNNING,))
        c.execute(_RARE, (RARE,))
        c.execute(
            "INSERT INTO conveyor.counts (queue, state, n) SELECT queue, state, count(*)"
            " FROM conveyor.jobs GROUP BY queue, state"
        )
        c.execute("INSERT INTO conveyor.queues (name) SELECT DISTINCT queue FROM conveyor.jobs")
        c.execute("VACUUM ANALYZE conveyor.jobs")
        yield broker, c
    broker.flush_all()
    broker.close()


@pytest.mark.parametrize(("label", "query"), list(_queries()), ids=[q[0] for q in _queries()])
def test_every_search_combination_reads_an_index_not_the_table(
    filled: tuple[PostgresBroker, Any], label: str, query: SearchQuery
) -> None:
    broker, c = filled
    seen: list[tuple[str, Any]] = []
    read = broker._read

    def capture(sql: str, params: Any = ()) -> list[Any]:
        seen.append((broker.sql(sql), params))
        return read(sql, params)

    broker._read = capture  # type: ignore[method-assign]
    try:
        broker.search(query)
    finally:
        broker._read = read  # type: ignore[method-assign]
    filters = sum(v is not None for v in (query.state, query.queue, query.task, query.id))
    windowed = query.since is not None or query.until is not None
    # a deep page reads the rows before it too (page 20: 950 of them)
    bound = BOUND + 5 * (query.page - 1) * query.page_size
    for sql, params in seen:
        row = c.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()
        plan = row[0][0]["Plan"]
        nodes = list(_walk(plan))
        scans = [f"{n['Node Type']} {n.get('Index Name') or n.get('Relation Name')}" for n in nodes]
        brief = (label, sql[:120], scans)
        assert not [
            n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"
        ], brief
        if filters >= 2 and not windowed:  # the shape that walked jobs_created to its end
            assert not [n for n in nodes if n.get("Index Name") == "jobs_created"], brief
        buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
        assert buffers <= bound, (buffers, *brief)


def test_the_gathered_page_matches_the_walked_order(filled: tuple[PostgresBroker, Any]) -> None:
    """A search with few matches reads them all and sorts them (newest first, ties by id):
    the same pages a full sort gives."""
    broker, c = filled
    query = SearchQuery(queue="q7", task="t17", since=T0 + N / 2, until=T0 + N / 2 + 2_000)
    want = [
        r[0]
        for r in c.execute(
            "SELECT id FROM conveyor.jobs WHERE queue = 'q7' AND task = 't17' AND created_at"
            " >= %s AND created_at < %s ORDER BY created_at DESC, id DESC",
            (query.since, query.until),
        )
    ]
    assert 0 < len(want) < 100
    got: list[str] = []
    for page in range(1, 10):
        found = broker.search(SearchQuery(**{**query.__dict__, "page": page, "page_size": 7}))
        assert found.total == len(want)
        got += [j.id for j in found.items]
    assert got == want


@pytest.mark.parametrize("task", ["t17", "rare"])
def test_the_walked_pages_merge_the_states_in_order(
    filled: tuple[PostgresBroker, Any], task: str
) -> None:
    """A task search with more matches than ``GATHER`` walks one range per state of the task's
    index and merges them: page by page the same rows, in the same order, as a full sort."""
    broker, c = filled
    want = [
        r[0]
        for r in c.execute(
            "SELECT id FROM conveyor.jobs WHERE task = %s ORDER BY created_at DESC, id DESC"
            " LIMIT 150",
            (task,),
        )
    ]
    got: list[str] = []
    for page in (1, 2, 3):
        found = broker.search(SearchQuery(task=task, page=page, page_size=50))
        assert found.total > GATHER
        got += [j.id for j in found.items]
    assert got == want


def test_a_version_4_schema_migrates_to_the_combined_search_indexes(pg_server: Any) -> None:
    """Version 4 → 5 rebuilds ``jobs_queue_created`` and ``jobs_task_created`` with the state
    (and the task one with the queue); stored and running jobs are found as before."""
    from conveyor.broker.base import Ack
    from conveyor.core.job import Job

    from .test_schema import run_cli

    url = pg_server.new_database()
    old = PostgresBroker.from_url(url)
    now = 1_700_000_000.0
    old.enqueue([Job(id="run", task="t", queue="q"), Job(id="wait", task="t", queue="q")], now)
    [running] = old.claim(["q"], now, limit=1, worker_id="w0")
    old.close()
    with psycopg.connect(url, autocommit=True) as c:  # what version 4 looked like
        for name, col in (("jobs_queue_created", "queue"), ("jobs_task_created", "task")):
            c.execute(f"DROP INDEX conveyor.{name}")
            c.execute(
                f"CREATE INDEX {name} ON conveyor.jobs ({col}, created_at) WHERE state <> 'active'"
            )
        c.execute("UPDATE conveyor.schema_version SET version = 4")
    assert run_cli("migrate", "--url", url, "--check").exit_code == 1
    assert run_cli("migrate", "--url", url).exit_code == 0
    with psycopg.connect(url, autocommit=True) as c:
        defs = dict(
            c.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'conveyor'"
            ).fetchall()
        )
    assert "(queue, state, created_at) INCLUDE (rid)" in defs["jobs_queue_created"]
    assert "(task, state, created_at) INCLUDE (queue, rid)" in defs["jobs_task_created"]
    new = PostgresBroker.from_url(url)
    both = SearchQuery(queue="q", task="t")
    assert [j.id for j in new.search(both).items] == ["wait", "run"]
    assert [j.id for j in new.search(SearchQuery(queue="q", state=JobState.PENDING)).items] == [
        "wait"
    ]
    assert new.complete([Ack(running.id, running.token)], now) == [True]
    assert [j.id for j in new.search(SearchQuery(task="t", state=JobState.COMPLETED)).items] == [
        "run"
    ]
    new.close()
