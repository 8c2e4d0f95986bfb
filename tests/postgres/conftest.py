"""Fixtures of the PostgreSQL-only tests: a flushed broker and raw psycopg connections on the
session's private cluster (tests/support/pg_proc.py; the ``pg_server`` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg")

from conveyor.broker.postgres.broker import PostgresBroker


@pytest.fixture
def pg(pg_server: Any) -> Iterator[PostgresBroker]:
    """A flushed ``PostgresBroker`` on the default schema."""
    broker = PostgresBroker.from_url(pg_server.url)
    broker.flush_all()
    yield broker
    broker.close()


@pytest.fixture
def one(pg_server: Any) -> Iterator[PostgresBroker]:
    """A flushed broker whose pool holds ONE connection (every call reuses it)."""
    broker = PostgresBroker.from_url(pg_server.url + "?pool_size=1")
    broker.flush_all()
    yield broker
    broker.close()


@pytest.fixture
def conn(pg_server: Any) -> Iterator[Any]:
    """A raw psycopg connection as an application holds it (not autocommit), with an
    application table ``orders``."""
    import psycopg

    with psycopg.connect(pg_server.url, autocommit=True) as setup:
        setup.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, note text)")
        setup.execute("TRUNCATE orders")
    c = psycopg.connect(pg_server.url)
    yield c
    c.close()
