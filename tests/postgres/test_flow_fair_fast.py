"""The one-statement claim of fair-only groups (postgres/flow.py ``_FAIR``): the rows it meets
that are not plain leases behave as on the general flow path and the plain claim — a head
past its ``expires_at`` expires, an undecodable head is dead-lettered, a head another
transaction holds leaves its group due a little later, a group with a limiter in the same
queue is served by the general path in its round-robin turn, and run-time overrides send the
claim the general way."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from conveyor import ConcurrencyLimit, Conveyor, JobState
from conveyor.broker.base import Ack

pytest.importorskip("psycopg")


def _app(url: str) -> tuple[Conveyor, Any, Any]:
    app = Conveyor(url)

    @app.task(name="fair", fair_by="key")
    def fair(key: str, i: int) -> None: ...

    @app.task(name="conc", concurrency=ConcurrencyLimit(1, key="key"))
    def conc(key: str, i: int) -> None: ...

    return app, fair, conc


def _claim(app: Conveyor, limit: int = 32) -> list[Any]:
    return app.broker.claim(["default"], time.time(), limit=limit, visibility_timeout=60)


def test_expired_and_undecodable_heads_do_not_lease(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, _ = _app(url)
    old = fair.options(expires_in=0.01).enqueue("a", 0)
    bad = fair.enqueue("b", 1)
    good = fair.enqueue("c", 2)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE conveyor.jobs SET payload = %s WHERE id = %s", (b"{not json", bad.id))
    time.sleep(0.05)
    leases = _claim(app)
    assert [x.id for x in leases] == [good.id]
    assert app.broker.get(old.id).state is JobState.EXPIRED
    assert app.broker.get(bad.id).state is JobState.DEAD_LETTER
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM conveyor.flow_groups").fetchone() == (0,)
    app.close()


def test_a_held_head_waits_and_other_groups_go_on(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, _ = _app(url)
    held, free = fair.enqueue("a", 0), fair.enqueue("b", 1)
    _claim(app, 0)  # the groups are scheduled
    with psycopg.connect(url) as other:
        other.execute("SELECT 1 FROM conveyor.jobs WHERE id = %s FOR UPDATE", (held.id,))
        assert [x.id for x in _claim(app)] == [free.id]
        other.rollback()
    time.sleep(0.1)  # sqllimits.BUSY_S
    assert [x.id for x in _claim(app)] == [held.id]
    app.close()


def test_a_limited_group_in_the_queue_keeps_its_turn(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, conc = _app(url)
    ids = [fair.enqueue("a", 0).id, conc.enqueue("x", 1).id, fair.enqueue("b", 2).id]
    ids += [conc.enqueue("x", 3).id, fair.enqueue("a", 4).id]
    first = [x.id for x in _claim(app)]
    assert sorted(first) == sorted(ids[:3] + ids[4:]), first  # the second conc job waits
    assert app.broker.complete([Ack(x.id, x.token) for x in _claim(app)], time.time()) == []
    app.close()


def test_run_time_overrides_send_the_claim_the_general_way(pg_server: Any) -> None:
    url = pg_server.new_database()
    app, fair, conc = _app(url)
    app.set_limit("conc:conc", 2)
    ids = [conc.enqueue("x", 0).id, conc.enqueue("x", 1).id, fair.enqueue("a", 2).id]
    assert sorted(x.id for x in _claim(app)) == sorted(ids)  # two of key x: the override
    app.close()


@pytest.mark.parametrize("task", ["fair", "conc"])
def test_grouped_claims_stay_on_their_indexes_whatever_the_statistics_say(
    pg_server: Any, task: str
) -> None:
    """A claim's statements are prepared and their plans cached: a generic plan made while the
    statistics said almost no job is pending (ANALYZE after a drain) must not walk every
    pending job through a state index per claim (it did for the leases of a grouped claim:
    ~2x the server CPU per job in some runs of bench/flow_control.py, the first-run dip), on
    the fair-only path (``_FAIR``) and the general one (``_HEADS``, ``claim._LEASE``)."""
    url = pg_server.new_database()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET plan_cache_mode = force_generic_plan'
        )
    app, fair, conc = _app(url)
    grouped = fair if task == "fair" else conc
    app.enqueue_many([grouped.spec(f"k{i}", i) for i in range(200)])
    _drain(app, 200)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ANALYZE conveyor.jobs")
        c.execute("ANALYZE conveyor.flow_groups")
    app.enqueue_many([grouped.spec(f"k{i % 500}", i) for i in range(2000)])
    app.close()  # a backend reports its statistics when it ends
    read = _index_reads(url)
    app, fair, conc = _app(url)
    _drain(app, 2000)
    app.close()
    walked = _index_reads(url, read)
    assert walked["jobs_pkey"] > 0, walked  # the statistics did arrive
    assert walked["jobs_state_created"] + walked["jobs_queue_created"] < 2000, walked


def _drain(app: Conveyor, n: int) -> None:
    done = 0
    while done < n:
        leases = _claim(app)
        assert leases, done
        app.broker.complete([Ack(x.id, x.token) for x in leases], time.time())
        done += len(leases)


def _index_reads(url: str, before: dict[str, int] | None = None) -> dict[str, int]:
    """Index tuples read per index of ``jobs`` (since ``before``), once the statistics of
    the ended backends arrived (they are flushed as a backend exits)."""
    sql = (
        "SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes"
        " WHERE schemaname = 'conveyor' AND relname = 'jobs'"
    )
    if before is None:
        time.sleep(0.3)  # the filling backends' last report
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(url, autocommit=True) as c:
            reads = {name: int(n) for name, n in c.execute(sql).fetchall()}
        if before is None or reads != before or time.monotonic() > deadline:
            return {k: v - (before or {}).get(k, 0) for k, v in reads.items()}
        time.sleep(0.05)


def test_few_groups_fill_a_claim_round_robin_on_the_fast_path(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three groups of 20 jobs fill a claim of 32 in rounds (11 + 11 + 10), each round one
    statement, without the general path's head reads; the next claim takes the rest."""
    app, fair, _ = _app(pg_server.new_database())
    app.enqueue_many([fair.spec(f"k{i % 3}", i) for i in range(60)])
    sent: list[str] = []
    execute = psycopg.Connection.execute

    def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", spy)
    for size in (32, 28):
        leases = _claim(app)
        assert len(leases) == size
        keys = sorted(app.broker.get(x.id).args[0] for x in leases)
        assert sorted(keys.count(k) for k in {"k0", "k1", "k2"}) == sorted(
            [size // 3 + (i < size % 3) for i in range(3)]
        )
        app.broker.complete([Ack(x.id, x.token) for x in leases], time.time())
        if size == 32:
            assert not any(q.startswith("SELECT g.grp") for q in sent), "the general path ran"
    app.close()


def test_parallel_fair_claimers_lease_each_job_once(pg_server: Any) -> None:
    """Four claimers (own connections, threads) drain 600 fair jobs over 50 groups: every job
    is leased exactly once and no group is left behind."""
    import threading

    url = pg_server.new_database()
    app, fair, _ = _app(url)
    ids = {j.id for j in app.enqueue_many([fair.spec(f"k{i % 50}", i) for i in range(600)])}
    leased: list[str] = []
    lock = threading.Lock()

    def claimer() -> None:
        own = Conveyor(url)
        empty = 0
        while empty < 3:
            leases = own.broker.claim(["default"], time.time(), limit=16, visibility_timeout=60)
            empty = 0 if leases else empty + 1
            with lock:
                leased.extend(x.id for x in leases)
            own.broker.complete([Ack(x.id, x.token) for x in leases], time.time())
        own.close()

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(leased) == sorted(ids)
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM conveyor.flow_groups").fetchone() == (0,)
    app.close()
