"""Shared fixtures: backends for the contract suite, clocks, apps."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.broker.base import Broker
from tests.support.backends import BACKENDS


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: Any) -> str:
    """The name of each backend in turn."""
    return str(request.param)


@pytest.fixture
def broker(request: Any, backend: str, tmp_path: Path) -> Iterator[Broker]:
    """A fresh, empty broker of each backend."""
    b = BACKENDS[backend](request, tmp_path, None)
    yield b
    b.close()


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock starting at a round, realistic epoch time."""
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def app(broker: Broker, clock: FakeClock) -> Conveyor:
    """An app on each backend with a fake clock and a seeded rng."""
    return Conveyor(broker, clock=clock, rng=random.Random(42))


# ---------------------------------------------------------------------- real Redis (issue 3)
@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real redis-server for the session (free loopback port, temp dir, stopped by pid)."""
    from tests.support import redis_proc

    if not redis_proc.available():
        pytest.skip("redis-server is not installed")
    server = redis_proc.RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    import logging

    # Brokers a test left open retry their pool connections: silence that once the server goes.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real 3-node Redis Cluster (created with ``redis-cli --cluster create``)."""
    from tests.support import redis_proc

    if not redis_proc.available():
        pytest.skip("redis-server is not installed")
    cluster = redis_proc.RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


# ---------------------------------------------------------------------- real PostgreSQL (issue 17)
@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One private PostgreSQL cluster for the session (initdb + pg_ctl, free loopback port)."""
    from tests.support import pg_proc

    if not pg_proc.available():
        if os.environ.get("CONVEYOR_REQUIRE_POSTGRES", "") not in ("", "0"):  # CI: never skip
            pytest.fail("CONVEYOR_REQUIRE_POSTGRES is set but PostgreSQL is not installed")
        pytest.skip("PostgreSQL server binaries (or psycopg) are not installed")
    server = pg_proc.PgServer()
    server.start()
    yield server
    import logging

    # Brokers a test left open retry their pool connections: silence that once the server goes.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    server.stop()
