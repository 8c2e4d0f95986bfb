"""Schema versions 4 and 6: the search indexes leave running jobs out (issue 17: server CPU
per job).

An UPDATE that changes ``state`` is never HOT, so the claim's new row version gets an entry in
every index whose predicate holds. ``jobs_state_created``, ``jobs_queue_created`` and
``jobs_task_created`` are partial (``WHERE state <> 'active'``) from version 4 on, and the
time-range index ``jobs_created`` from version 6 on: a claim enters 3 indexes instead of 7.
Searches must still find running jobs (through ``jobs_lease``) in the same order and pages,
and never scan ``jobs`` sequentially.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest

from conveyor.broker.base import Ack, SearchQuery
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.core.state import JobState
from conveyor.errors import BrokerUnavailable

from .test_schema import run_cli
from .test_vacuum_explain import _FILL, plan

LEAN = ("jobs_state_created", "jobs_queue_created", "jobs_task_created")
#: every index a running job stays out of (schema version 6)
LEAN_ALL = (*LEAN, "jobs_created")


def _indexdefs(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'conveyor'")
        return dict(rows.fetchall())


def test_running_jobs_stay_out_of_the_search_indexes(pg: PostgresBroker, pg_server: Any) -> None:
    defs = _indexdefs(pg_server.url)
    for name in LEAN_ALL:
        assert "WHERE (state <> 'active'" in defs[name], defs[name]


def _fill(pg: PostgresBroker) -> list[Job]:
    now = time.time()
    jobs = [
        Job(
            id=f"j{i}",
            task=f"t{i % 2}",
            queue=f"q{i % 3}",
            args=[f"a{i}"],
            created_at=now + i,
            run_at=now,
        )
        for i in range(12)
    ]
    pg.enqueue(jobs, now)
    for queue in ("q0", "q1", "q2"):  # two running jobs per queue, then one of them completed
        leases = pg.claim([queue], now, limit=2, worker_id="w")
        pg.complete([Ack(leases[0].id, leases[0].token)], now)
    return jobs


QUERIES = [
    SearchQuery(),
    SearchQuery(state=JobState.ACTIVE),
    SearchQuery(state=JobState.PENDING),
    SearchQuery(queue="q1"),
    SearchQuery(task="t0"),
    SearchQuery(task="t1", state=JobState.ACTIVE),
    SearchQuery(queue="q2", task="t1"),
    SearchQuery(text="a", queue="q0"),
]


@pytest.mark.parametrize("query", QUERIES, ids=repr)
def test_searches_find_running_jobs_in_order_page_by_page(
    pg: PostgresBroker, query: SearchQuery
) -> None:
    _fill(pg)
    every = [pg.get(f"j{i}") for i in range(12)]
    expected = [
        j.id
        for j in sorted(every, key=lambda j: (j.created_at, j.id), reverse=True)
        if (query.state is None or j.state is query.state)
        and (query.queue is None or j.queue == query.queue)
        and (query.task is None or j.task == query.task)
    ]
    assert any(pg.get(i).state is JobState.ACTIVE for i in expected) or query.state is not None
    got: list[str] = []
    for page in range(1, 8):
        found = pg.search(SearchQuery(**{**query.__dict__, "page": page, "page_size": 2}))
        assert found.total == len(expected)
        got += [j.id for j in found.items]
    assert got == expected


def test_time_range_searches_find_running_jobs(pg: PostgresBroker) -> None:
    jobs = _fill(pg)
    t0 = jobs[0].created_at
    for since, until, state in (
        (t0 + 3, None, None),
        (None, t0 + 7, None),
        (t0 + 2, t0 + 10, None),
        (t0 + 1, None, JobState.ACTIVE),
        (None, t0 + 9, JobState.PENDING),
    ):
        every = [pg.get(f"j{i}") for i in range(12)]
        expected = [
            j.id
            for j in sorted(every, key=lambda j: (j.created_at, j.id), reverse=True)
            if (since is None or j.created_at >= since)
            and (until is None or j.created_at < until)
            and (state is None or j.state is state)
        ]
        got: list[str] = []
        for page in range(1, 8):
            q = SearchQuery(since=since, until=until, state=state, page=page, page_size=2)
            found = pg.search(q)
            assert found.total == len(expected), q
            got += [j.id for j in found.items]
        assert got == expected, (since, until, state)
        assert any(pg.get(i).state is JobState.ACTIVE for i in got) or state is not None


def _seq_scans_of_jobs(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") == "jobs":
        yield node
    for child in node.get("Plans", ()):
        yield from _seq_scans_of_jobs(child)


def test_searches_use_their_indexes_at_30k_jobs(pg: PostgresBroker, pg_server: Any) -> None:
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        c.execute(_FILL, (30_000,))
        c.execute("ANALYZE conveyor.jobs")
        seen: list[tuple[str, Any]] = []
        read = pg._read

        def capture(sql: str, params: Any = ()) -> list[Any]:
            seen.append((pg.sql(sql), params))
            return read(sql, params)

        pg._read = capture  # type: ignore[method-assign]
        for query in (
            SearchQuery(),
            SearchQuery(state=JobState.ACTIVE),
            SearchQuery(state=JobState.DEAD_LETTER),
            SearchQuery(queue="q7"),
            SearchQuery(task="t9"),
            SearchQuery(task="t9", page=20),
            SearchQuery(since=1e9 + 29_000),
            SearchQuery(since=1e9 + 20_000, until=1e9 + 21_000),
            SearchQuery(until=1e9 + 500, state=JobState.ACTIVE),
        ):
            pg.search(query)
        for sql, params in seen:
            text = plan(c, sql, params)
            nodes = orjson.loads(text)[0]["Plan"]
            assert not list(_seq_scans_of_jobs(nodes)), (sql, params, _brief(nodes))


def test_a_version_3_schema_migrates_to_the_lean_search_indexes(pg_server: Any) -> None:
    url = pg_server.new_database()
    old = PostgresBroker.from_url(url)
    now = time.time()
    old.enqueue([Job(id="run", task="t"), Job(id="wait", task="t")], now)
    [running] = old.claim(["default"], now, limit=1, worker_id="w0")
    old.close()
    with psycopg.connect(url, autocommit=True) as c:  # what version 3 looked like
        for name, col in zip(LEAN, ("state", "queue", "task"), strict=True):
            c.execute(f"DROP INDEX conveyor.{name}")
            c.execute(f"CREATE INDEX {name} ON conveyor.jobs ({col}, created_at)")
        c.execute("UPDATE conveyor.schema_version SET version = 3")
    assert run_cli("migrate", "--url", url, "--check").exit_code == 1
    assert run_cli("migrate", "--url", url).exit_code == 0
    for name in LEAN:
        assert "WHERE (state <> 'active'" in _indexdefs(url)[name]
    new = PostgresBroker.from_url(url)
    assert [j.id for j in new.search(SearchQuery()).items] == ["wait", "run"]
    assert [j.id for j in new.search(SearchQuery(state=JobState.ACTIVE)).items] == ["run"]
    assert new.complete([Ack(running.id, running.token)], now) == [True]
    new.close()


def test_a_version_5_schema_migrates_to_the_lean_time_index(pg_server: Any) -> None:
    url = pg_server.new_database()
    old = PostgresBroker.from_url(url)
    now = time.time()
    old.enqueue(
        [Job(id=i, task="t", created_at=now + k) for k, i in enumerate(["run", "wait"])], now
    )
    [running] = old.claim(["default"], now, limit=1, worker_id="w0")
    old.close()
    with psycopg.connect(url, autocommit=True) as c:  # what version 5 looked like
        c.execute("DROP INDEX conveyor.jobs_created")
        c.execute("CREATE INDEX jobs_created ON conveyor.jobs (created_at)")
        c.execute("UPDATE conveyor.schema_version SET version = 5")
    with pytest.raises(BrokerUnavailable, match="conveyor migrate"):
        PostgresBroker.from_url(url)  # never changed silently
    assert run_cli("migrate", "--url", url, "--check").exit_code == 1
    assert run_cli("migrate", "--url", url).exit_code == 0
    assert "WHERE (state <> 'active'" in _indexdefs(url)["jobs_created"]
    new = PostgresBroker.from_url(url)
    since = SearchQuery(since=now - 60)
    assert [j.id for j in new.search(since).items] == ["wait", "run"]
    assert new.search(since).total == 2
    assert new.complete([Ack(running.id, running.token)], now) == [True]
    assert [j.id for j in new.search(since).items] == ["wait", "run"]
    new.close()


def _brief(node: dict[str, Any], depth: int = 0) -> str:
    """The plan as indented lines: node type, index, relation, filter."""
    keys = ("Node Type", "Index Name", "Relation Name", "Filter")
    line = " " * depth + " ".join(str(node.get(k, "")) for k in keys)
    return "\n".join([line, *(_brief(c, depth + 2) for c in node.get("Plans", ()))])
