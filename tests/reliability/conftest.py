"""Fixtures of the reliability suite, and the soak switch.

Tests marked ``@pytest.mark.soak`` (the long profile) are skipped unless ``-m soak`` selects
them or ``CONVEYOR_SOAK=1`` is set, so a plain ``pytest`` run only takes the quick profile.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.harness import Ledger, Workers
from tests.support import redis_proc


def soak_enabled(config: pytest.Config) -> bool:
    """True when the soak profile was asked for (``-m soak`` or ``CONVEYOR_SOAK=1``)."""
    if os.environ.get("CONVEYOR_SOAK", "") not in ("", "0"):
        return True
    expr = (config.getoption("markexpr", "") or "").replace(" ", "")
    return "soak" in expr and "notsoak" not in expr


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip soak tests unless the soak profile was asked for."""
    if soak_enabled(config):
        return
    skip = pytest.mark.skip(reason="soak profile: run with -m soak or CONVEYOR_SOAK=1")
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """The test's execution ledger (a file outside the broker)."""
    return Ledger(tmp_path / "ledger.log")


StartWorkers = Callable[..., Workers]


@pytest.fixture
def start_workers(tmp_path: Path, ledger: Ledger) -> Iterator[StartWorkers]:
    """``start_workers(url, *cli_args, **env)``: a ``conveyor worker`` supervisor writing to the
    test's ledger. Every process it started is killed at teardown, even if the test failed."""
    started: list[Workers] = []

    def start(url: str, *args: str, **env: str) -> Workers:
        name = f"workers{len(started)}"
        workers = Workers(
            url, tmp_path, name, *args, env={"RELIABILITY_LEDGER": str(ledger.path), **env}
        )
        started.append(workers)
        return workers

    yield start
    for workers in started:
        workers.close()


EVERYSEC = ("--appendonly", "yes", "--appendfsync", "everysec")
StartRedis = Callable[..., redis_proc.RedisServer]


@pytest.fixture
def start_redis(tmp_path: Path) -> Iterator[StartRedis]:
    """``start_redis(aof=False, extra=())``: a private redis-server (own port and directory),
    stopped by pid at teardown."""
    if not redis_proc.available():
        pytest.skip("redis-server is not installed")
    started: list[redis_proc.RedisServer] = []

    def start(**options: Any) -> redis_proc.RedisServer:
        server = redis_proc.RedisServer(tmp_path / f"redis{len(started)}", **options)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def redis_url(start_redis: StartRedis) -> str:
    """A private Redis (AOF, ``appendfsync everysec``) for the Redis-only scenarios."""
    return str(start_redis(extra=EVERYSEC).url)


@pytest.fixture(params=["redis", "sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A broker URL several processes share: a private Redis (AOF, ``appendfsync everysec``, the
    production setting), a real SQLite file, or a fresh database on the session's private
    PostgreSQL cluster."""
    if request.param == "redis":
        server = request.getfixturevalue("start_redis")(extra=EVERYSEC)
        return str(server.url)
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").new_database())
    return f"sqlite:///{tmp_path / 'jobs.db'}"


StartPg = Callable[[], Any]


@pytest.fixture
def start_pg() -> Iterator[StartPg]:
    """``start_pg()``: a private PostgreSQL cluster of the test's own (it may be killed),
    stopped at teardown."""
    from tests.support import pg_proc

    if not pg_proc.available():
        if os.environ.get("CONVEYOR_REQUIRE_POSTGRES", "") not in ("", "0"):  # CI: never skip
            pytest.fail("CONVEYOR_REQUIRE_POSTGRES is set but PostgreSQL is not installed")
        pytest.skip("PostgreSQL server binaries (or psycopg) are not installed")
    started: list[Any] = []

    def start() -> Any:
        server = pg_proc.PgServer()
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()
