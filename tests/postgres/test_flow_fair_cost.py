"""Issue 15's PostgreSQL fair-group number (10,000 groups ≥ 0.80 of the no-limit drain): what a
claim of grouped jobs costs beyond a plain claim, counted in statements (each one a round trip
and a server execution), and the groups a drain revisits only to find them empty."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import psycopg
import pytest

from conveyor import ConcurrencyLimit, Conveyor, JobState
from conveyor.broker.base import Ack, Broker
from conveyor.broker.postgres import wire

pytest.importorskip("psycopg")


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Statements run while the block runs (every row of an ``executemany`` counted: each is
    one statement on the server)."""
    statements = Counter[str]()
    execute, executemany = psycopg.Connection.execute, psycopg.Cursor.executemany

    def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        statements[str(query)[:60]] += 1
        return execute(self, query, params, **kw)

    def spy_many(self: Any, query: Any, rows: Any, **kw: Any) -> Any:
        rows = list(rows)
        statements[str(query)[:60]] += len(rows)
        return executemany(self, query, rows, **kw)

    def spy_wire(conn: Any, batch: Any, binary: Any) -> Any:  # postgres/wire.py's batches
        for sql, _ in batch:
            statements[str(sql)[:60]] += 1
        return run(conn, batch, binary)

    run = wire._run
    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Connection, "execute", spy)
        patch.setattr(psycopg.Cursor, "executemany", spy_many)
        patch.setattr(wire, "_run", spy_wire)
        yield statements


def _claims(broker: Broker, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """Statements of ``n`` claims of 32 jobs (each batch completed outside the count)."""
    total, ids = 0, []
    for _ in range(n):
        with counted(monkeypatch) as statements:
            leases = broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
        assert len(leases) == 32
        total += sum(statements.values())
        ids += [x.id for x in leases]
        assert broker.complete([Ack(x.id, x.token) for x in leases], time.time()) == [True] * 32
    return total, ids


def _app(url: str) -> tuple[Conveyor, Callable[..., Any], Callable[..., Any]]:
    app = Conveyor(url)

    @app.task(name="fair", fair_by="key")
    def fair(key: str, i: int) -> None: ...

    @app.task(name="plain")
    def plain(key: str, i: int) -> None: ...

    return app, fair, plain


def test_a_fair_claim_costs_at_most_three_statements_more_than_a_plain_one(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 fair groups of two jobs each drain in 4 claims of 32; each costs at most three
    statements more than a claim of 32 plain jobs (the flow lock; the heads, locked; the
    groups' moves and deletes), where it cost six more (the lock, a look-up of overrides, head
    ids, head rows, round-robin numbers, the moves, the empty groups' deletes)."""
    app, fair, plain = _app(pg_server.new_database())
    app.enqueue_many([plain.spec("k", i) for i in range(128)])
    base, _ = _claims(app.broker, 4, monkeypatch)
    app.enqueue_many([fair.spec(f"k{i % 64}", i) for i in range(128)])
    grouped, ids = _claims(app.broker, 4, monkeypatch)
    assert grouped <= base + 3 * 4, (grouped, base)
    assert {app.broker.get(i).state for i in ids} == {JobState.COMPLETED}
    app.close()


def test_the_flow_lock_rides_with_the_claims_look_up(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a process has seen flow groups, its claim takes the flow lock in the look-up's
    statement (the same round trip), not in a statement of its own: a fair claim costs at
    most two statements more than a plain one (the heads, locked; the groups' moves and
    deletes)."""
    app, fair, plain = _app(pg_server.new_database())
    app.enqueue_many([plain.spec("k", i) for i in range(128)])
    base, _ = _claims(app.broker, 4, monkeypatch)
    app.enqueue_many([fair.spec(f"k{i % 64}", i) for i in range(160)])
    _claims(app.broker, 1, monkeypatch)  # the first one learns that groups exist
    with counted(monkeypatch) as statements:
        grouped, ids = _claims(app.broker, 4, monkeypatch)
    assert not any("pg_advisory_xact_lock" in s for s in statements), statements
    assert grouped <= base + 2 * 4, (grouped, base)
    assert {app.broker.get(i).state for i in ids} == {JobState.COMPLETED}
    app.close()


def test_a_group_whose_last_job_is_leased_is_gone_at_once(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group is deleted by the claim that leases its last pending job (idle groups cost
    nothing), not kept to be found empty on its next turn; round-robin order is unchanged:
    every group's first job before any group's second."""
    url = pg_server.new_database()
    app, fair, _ = _app(url)
    app.enqueue_many([fair.spec(f"k{i % 32}", i) for i in range(64)])
    _, ids = _claims(app.broker, 2, monkeypatch)
    order = [app.broker.get(i).args[1] for i in ids]
    assert sorted(order[:32]) == list(range(32)) and sorted(order[32:]) == list(range(32, 64))
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM conveyor.flow_groups").fetchone() == (0,)
    app.close()


def test_completing_fair_jobs_parses_each_envelope_once(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fair job holds no concurrency slot: its completion parses its envelope once (to write
    the completed one), not a second time to look for slot names; a job with a slot still
    frees it (its group names it: ``conc:…``)."""
    app, fair, _ = _app(pg_server.new_database())

    @app.task(name="conc", concurrency=ConcurrencyLimit(1, key="key"), fair_by="key")
    def conc(key: str) -> None: ...

    app.enqueue_many([fair.spec(f"k{i}", i) for i in range(32)])
    leases = app.broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    parses = Counter[int]()
    loads = orjson.loads

    def spy(data: Any) -> Any:
        parses[0] += 1
        return loads(data)

    monkeypatch.setattr(orjson, "loads", spy)
    assert app.broker.complete([Ack(x.id, x.token) for x in leases], time.time()) == [True] * 32
    monkeypatch.undo()
    assert parses[0] <= 32, parses
    first, second = conc.enqueue("a"), conc.enqueue("a")
    [lease] = app.broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert lease.id == first.id
    assert app.broker.complete([Ack(lease.id, lease.token)], time.time()) == [True]
    [lease] = app.broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
    assert lease.id == second.id  # the slot freed with the first
    app.close()


def test_a_fair_only_claim_is_one_statement_and_no_full_decode(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups with no limiter (``fair_by`` alone) are claimed like plain jobs: one statement
    picks the due groups, locks and leases their heads and moves or deletes the groups (it
    was three: the heads, the leases, the moves), and the claimed jobs come from the plain
    envelope's template copy, not a full ``job_from_dict`` per job."""
    from conveyor.core import serialization

    app, fair, plain = _app(pg_server.new_database())
    app.enqueue_many([plain.spec("k", i) for i in range(128)])
    base, _ = _claims(app.broker, 4, monkeypatch)
    app.enqueue_many([fair.spec(f"k{i % 64}", i) for i in range(160)])
    _claims(app.broker, 1, monkeypatch)  # the first one learns that groups exist
    decodes = Counter[int]()
    full = serialization._job_values

    def spy(data: Any) -> Any:
        decodes[0] += 1
        return full(data)

    monkeypatch.setattr(serialization, "_job_values", spy)
    grouped, ids = _claims(app.broker, 4, monkeypatch)
    claimed_decodes = decodes[0]
    monkeypatch.undo()
    assert grouped <= base, (grouped, base)
    assert claimed_decodes == 0, claimed_decodes
    assert {app.broker.get(i).state for i in ids} == {JobState.COMPLETED}
    app.close()
