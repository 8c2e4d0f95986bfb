"""Flow control and workflows on PostgreSQL where it differs from SQLite: claimers run in
parallel (the contract suite covers the semantics with one claimer at a time).

* Two claimers on two connections never exceed a ``ConcurrencyLimit`` (the flow lock).
* A grouped job enqueued in the caller's open transaction is claimed once the caller commits,
  even if a claimer dropped its group as empty in between (``flow_pending``).
* A version 1 schema migrates to the current version (2: workflows and flow control, 3: the
  claim overlay) and its jobs run.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest

from conveyor import ConcurrencyLimit, Conveyor, JobState, chain
from conveyor.broker.base import Ack
from conveyor.broker.postgres import schema as pg_schema
from conveyor.broker.postgres.broker import PostgresBroker

pytestmark = pytest.mark.timeout(60)


def test_parallel_claimers_never_exceed_a_concurrency_limit(pg_server: Any) -> None:
    url = pg_server.new_database()
    app = Conveyor(url)

    @app.task(name="flow.sync", concurrency=ConcurrencyLimit(1, key="account"))
    def sync(account: int, n: int) -> None: ...

    for n in range(80):
        sync.enqueue(n % 4, n)
    running: Counter[int] = Counter()
    worst: list[int] = []
    lock = threading.Lock()
    done: list[str] = []

    def claimer() -> None:
        broker = PostgresBroker.from_url(url)
        try:
            deadline = time.monotonic() + 30
            while len(done) < 80 and time.monotonic() < deadline:
                leases = broker.claim(["default"], time.time(), limit=4, worker_id="w")
                with lock:
                    for lease in leases:
                        running[lease.job.args[0]] += 1
                    worst.append(max(running.values(), default=0))
                time.sleep(0.002)  # "run" the jobs while the other claimers try
                with lock:
                    for lease in leases:
                        running[lease.job.args[0]] -= 1
                broker.complete([Ack(lease.id, lease.token) for lease in leases], time.time())
                with lock:
                    done.extend(lease.id for lease in leases)
        finally:
            broker.close()

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    app.close()
    assert len(done) == 80 and len(set(done)) == 80
    assert max(worst) == 1, "two jobs of one account ran at once"


def test_grouped_job_enqueued_in_an_open_transaction_survives_its_group_being_dropped(
    pg: PostgresBroker, conn: Any
) -> None:
    app = Conveyor(pg)

    @app.task(name="flow.one", concurrency=ConcurrencyLimit(1, key="account"))
    def one(account: int, n: int) -> None: ...

    first, second = one.enqueue(7, 1), one.enqueue(7, 2)
    claim = lambda: [x.id for x in pg.claim(["default"], time.time(), limit=5, worker_id="w")]  # noqa: E731
    leases = pg.claim(["default"], time.time(), limit=5, worker_id="w")
    assert [x.id for x in leases] == [first.id]  # the group now waits for the slot
    later = one.options(connection=conn).enqueue(7, 3)  # not committed yet
    pg.complete([Ack(leases[0].id, leases[0].token)], time.time())
    leases = pg.claim(["default"], time.time(), limit=5, worker_id="w")
    assert [x.id for x in leases] == [second.id]  # ... and the group, found empty, is dropped
    conn.commit()
    pg.complete([Ack(leases[0].id, leases[0].token)], time.time())
    assert claim() == [later.id]


def test_a_version_1_schema_migrates_and_its_jobs_run(pg_server: Any) -> None:
    url = pg_server.new_database()
    with psycopg.connect(url, autocommit=True) as c, c.transaction():
        for sql in pg_schema.statements(pg_schema.SCHEMA, "conveyor"):
            c.execute(sql)
        c.execute("INSERT INTO conveyor.schema_version VALUES (1)")
    with pytest.raises(Exception, match="conveyor migrate"):
        PostgresBroker.from_url(url)
    broker = PostgresBroker.from_url(url + "?migrate=true")
    app = Conveyor(broker)

    @app.task(name="wf.add")
    def add(a: int, b: int) -> int:
        return a + b

    flow = chain(add.partial(1, 2), add.partial(10)).enqueue()
    for _ in range(2):
        [lease] = broker.claim(["default"], time.time(), limit=5, worker_id="w")
        result = add(*lease.job.args)
        broker.complete([Ack(lease.id, lease.token, result)], time.time())
    assert [j.state for j in flow.jobs()] == [JobState.COMPLETED] * 2
    assert flow.result() == 13
    app.close()


def test_both_claim_paths_lease_alike_and_complete_in_one_batch(pg_server: Any) -> None:
    """A grouped job (leased per batch under the flow lock) and a plain one (the one-statement
    claim) both get the claim overlay and read back alike, and one set-based ``complete`` batch
    finishes both: the grouped one's slot frees (the group's next job is claimable)."""
    url = pg_server.new_database()
    app = Conveyor(url)
    broker = app.broker
    assert isinstance(broker, PostgresBroker)

    @app.task(name="flow.one", concurrency=ConcurrencyLimit(1, key="account"))
    def one(account: int) -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    first, second = one.enqueue(1), one.enqueue(1)
    free = plain.enqueue()
    now = time.time()
    leases = broker.claim(["default"], now, limit=5, visibility_timeout=60, worker_id="w")
    assert [x.id for x in leases] == [first.id, free.id]  # groups first; the group's slot is full
    with psycopg.connect(url) as c:
        claims = dict(c.execute("SELECT id, claims FROM conveyor.jobs").fetchall())
    assert (claims[first.id], claims[free.id]) == (1, 1)  # no per-job envelope write
    for lease in leases:
        got = broker.get(lease.id)
        assert (got.state, got.attempts, got.worker_id) == (JobState.ACTIVE, 1, "w")
        assert got.lease_expires_at == pytest.approx(now + 60, abs=1e-3)
    acks = [Ack(x.id, x.token, x.id) for x in leases]
    assert broker.complete(acks, time.time()) == [True, True]
    for lease in leases:
        got = broker.get(lease.id)
        assert (got.state, got.result, got.attempts) == (JobState.COMPLETED, lease.id, 1)
    [again] = broker.claim(["default"], time.time(), limit=5, worker_id="w")
    assert again.id == second.id
    app.close()


@pytest.mark.parametrize("kind", ["fair", "conc"])
def test_grouped_claims_and_completions_are_batched(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Issue 15's numbers: claiming and completing 32 grouped jobs (32 groups, fair or each with
    ``ConcurrencyLimit(1)``) costs a few statements per batch, not several per job (every row
    of an ``executemany`` counted: each is one statement on the server)."""
    url = pg_server.new_database()
    app = Conveyor(url)
    broker = app.broker

    @app.task(name="fair", fair_by="key")
    def fair(key: str) -> None: ...

    @app.task(name="conc", concurrency=ConcurrencyLimit(1, key="key"))
    def conc(key: str) -> None: ...

    task = fair if kind == "fair" else conc
    app.enqueue_many([task.spec(f"k{i}") for i in range(64)])
    statements = Counter[str]()
    execute, executemany = psycopg.Connection.execute, psycopg.Cursor.executemany

    def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        statements["one"] += 1
        return execute(self, query, params, **kw)

    def spy_many(self: Any, query: Any, rows: Any, **kw: Any) -> Any:
        rows = list(rows)
        statements["many"] += len(rows)
        return executemany(self, query, rows, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", spy)
    monkeypatch.setattr(psycopg.Cursor, "executemany", spy_many)
    leases = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert len(leases) == 32
    assert broker.complete([Ack(x.id, x.token) for x in leases], time.time()) == [True] * 32
    monkeypatch.undo()
    assert sum(statements.values()) < 32, statements  # fewer than one per job
    assert [j.state for j in map(broker.get, [x.id for x in leases])] == [JobState.COMPLETED] * 32
    with psycopg.connect(url) as c:  # every slot freed with its job
        assert c.execute("SELECT count(*) FROM conveyor.flow_slots").fetchone() == (0,)
    assert len(broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)) == 32
    app.close()
