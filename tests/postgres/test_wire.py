"""The last round trip of a write transaction on libpq's pipeline directly (issue 17: client
CPU per claim and completion; ``postgres/wire.py``).

A plain claim (BEGIN, the look-up and the guarded claim; the settle statement and COMMIT) and
a completion (BEGIN and the row locks; the ``UPDATE``, the settle statement, the retention
caps and COMMIT) no longer go through psycopg's cursors; rows are still loaded by psycopg's
own loaders. Errors keep their psycopg class, and psycopg's ``DEALLOCATE ALL`` after
a ROLLBACK never leaves the batch naming a statement the server forgot.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.errors import BrokerUnavailable


def _cursor_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = psycopg.Connection.execute

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(query)[:40])
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    return calls


def test_claim_and_completion_send_only_what_they_read_through_psycopg(
    one: PostgresBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    one.enqueue([Job(id=f"j{i}", task="t") for i in range(5)], now)
    one.claim(["other"], now, limit=8)  # this thread's LISTEN connection opens
    calls = _cursor_calls(monkeypatch)
    leases = one.claim(["default"], now, limit=8)
    assert len(leases) == 5
    assert calls == []  # BEGIN, the look-up, the guarded claim; settle, COMMIT: all on libpq
    calls.clear()
    assert one.complete([Ack(x.job.id, x.token) for x in leases], now) == [True] * 5
    assert calls == []  # BEGIN, the row locks; the UPDATE, settle, caps, COMMIT
    assert one.counts()["default"]["completed"] == 5
    assert [e["type"] for e in one.events.read(None, 100)[0]].count("completed") == 5


def test_a_rollback_on_the_connection_never_leaves_a_forgotten_statement(
    one: PostgresBroker,
) -> None:
    """psycopg answers a ROLLBACK with ``DEALLOCATE ALL``: the next batch prepares again."""
    now = time.time()
    for round_ in range(3):
        one.enqueue([Job(id=f"r{round_}", task="t")], now)
        leases = one.claim(["default"], now, limit=2)
        with pytest.raises(RuntimeError), one._write() as tx:  # a failed transaction
            tx.first(one.sql("SELECT count(*) FROM {S}.jobs"))
            raise RuntimeError("the caller's code failed")
        assert one.complete([Ack(x.job.id, x.token) for x in leases], now) == [True]
    assert one.counts()["default"]["completed"] == 3


def test_an_error_in_the_batch_keeps_its_class_and_the_transaction_rolls_back(
    one: PostgresBroker,
) -> None:
    now = time.time()
    one.enqueue([Job(id="a", task="t"), Job(id="b", task="t")], now)
    with pytest.raises(psycopg.errors.UniqueViolation), one._write() as tx:
        tx.count("default", "pending", "active")  # something to settle
        tx.defer(one.sql("UPDATE {S}.jobs SET id = %s WHERE id = %s"), ("b", "a"))
    assert {j.id for j in one.peek("default")} == {"a", "b"}
    assert one.counts()["default"]["pending"] == 2  # the settle rolled back with it
    leases = one.claim(["default"], now, limit=2)  # the connection is usable again
    assert one.complete([Ack(x.job.id, x.token) for x in leases], now) == [True, True]


def test_a_connection_killed_under_the_batch_is_a_broker_outage_then_recovers(
    one: PostgresBroker, pg_server: Any
) -> None:
    now = time.time()
    one.enqueue([Job(id="k", task="t")], now)
    [pid] = one._read("SELECT pg_backend_pid()")[0]
    with psycopg.connect(pg_server.url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(BrokerUnavailable):
        one.claim(["default"], now, limit=1)
    deadline = time.monotonic() + 30
    while True:  # the pool replaces the connection
        try:
            leases = one.claim(["default"], now, limit=1)
            break
        except BrokerUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert [x.job.id for x in leases] == ["k"]
    assert one.complete([Ack("k", leases[0].token)], now) == [True]
