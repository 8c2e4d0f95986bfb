"""A schema change under a running broker whose pool is larger than the lock-conflict retry's
attempts, on a real cluster. Every pooled connection that prepared the claim, the completion or
a read before a returned column's type changed holds an outdated plan: the server refuses it
once (0A000 "cached plan must not change result type"). The pool hands its idle connections
out in turn, so a call retried on a fresh checkout met a different outdated connection each
attempt and, with more than 5 of them, ended in ``BrokerUnavailable``. Now the first refusal
makes every pooled connection deallocate its statements once, at its next checkout: the call
succeeds, and so does every later one."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.broker.postgres.retry import ATTEMPTS, Retry
from conveyor.core.job import Job

#: more outdated connections than attempts; prime, so a run of calls that each take the same
#: number of checkouts (fewer than POOL) visits every connection
POOL = 7
assert POOL > ATTEMPTS


@pytest.fixture
def big(pg_server: Any) -> Iterator[PostgresBroker]:
    """A flushed broker with ``POOL`` open connections, each used in turn from now on."""
    broker = PostgresBroker.from_url(pg_server.url + f"?pool_size={POOL}")
    broker.flush_all()
    broker.retry = Retry(random.Random(11), sleep=lambda s: None)
    with ExitStack() as stack:  # open them all: the pool then hands them out in turn
        for _ in range(POOL):
            stack.enter_context(broker.pool().connection())
    yield broker
    broker.close()


@pytest.fixture
def admin(pg_server: Any) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection of its own (the DDL)."""
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        yield c


def _outdate(broker: PostgresBroker, admin: psycopg.Connection[Any], n: int) -> list[Any]:
    """``n`` leases, the claim, completion and read statements prepared on every pooled
    connection (each call takes the next one), then a returned column's type changed."""
    now = time.time()
    broker.enqueue([Job(id=f"r{i}", task="t") for i in range(n + 3 * POOL)], now)
    # every connection claims, completes and reads (each run of calls visits all of them)
    leases = [broker.claim(["default"], now, limit=1)[0] for _ in range(3 * POOL)]
    for x in leases:
        assert broker.complete([Ack(x.job.id, x.token)], now) == [True]
    for _ in range(6 * POOL):  # psycopg prepares a read at its 5th run on a connection
        assert broker.get("r0") is not None
    with broker._connection() as c:
        assert c.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] > 0
    admin.execute(broker.sql("ALTER TABLE {S}.jobs ALTER COLUMN worker TYPE varchar(500)"))
    return [broker.claim(["default"], now, limit=1)[0] for _ in range(n)]


def test_one_call_after_a_type_change_succeeds_whatever_the_pool_size(
    big: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    try:
        leases = _outdate(big, admin, 2 * POOL)  # before: BrokerUnavailable, 0A000 x 5
        now = time.time()
        for x in leases:
            assert big.complete([Ack(x.job.id, x.token)], now) == [True]
        assert big.counts()["default"]["completed"] == 5 * POOL
    finally:
        admin.execute(big.sql("ALTER TABLE {S}.jobs ALTER COLUMN worker TYPE text"))


def test_reads_after_a_type_change_succeed_on_every_pooled_connection(
    big: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    """A read psycopg prepared (autocommit: no rollback makes psycopg forget it) raised 0A000
    to the caller on every later call on that connection, for good."""
    try:
        _outdate(big, admin, 0)  # reads first: no write has met the change yet
        for _ in range(3 * POOL):
            job = big.get("r0")  # before: FeatureNotSupported, cached plan ... result type
            assert job is not None and job.state.value == "completed"
        big.enqueue([Job(id="after", task="t")], time.time())
        [x] = big.claim(["default"], time.time(), limit=1)
        assert big.complete([Ack(x.job.id, x.token)], time.time()) == [True]
    finally:
        admin.execute(big.sql("ALTER TABLE {S}.jobs ALTER COLUMN worker TYPE text"))


def test_an_enqueue_after_a_type_change_succeeds_whatever_the_pool_size(
    big: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    """A plain enqueue is one autocommit statement whose settle part returns the ``counts``
    rows it changed: prepared on every connection, outdated when their type changes."""
    now = time.time()
    for i in range(3 * POOL):  # every connection prepares the statement
        big.enqueue([Job(id=f"e{i}", task="t")], now)
    admin.execute(
        big.sql('ALTER TABLE {S}.counts ALTER COLUMN queue TYPE varchar(300) COLLATE "C"')
    )
    try:
        for i in range(2 * POOL):  # before: BrokerUnavailable / FeatureNotSupported
            big.enqueue([Job(id=f"f{i}", task="t")], now)
        assert big.counts()["default"]["pending"] == 5 * POOL
    finally:
        admin.execute(big.sql('ALTER TABLE {S}.counts ALTER COLUMN queue TYPE text COLLATE "C"'))
