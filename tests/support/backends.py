"""Which brokers the contract suite runs over, and how each is opened for one test.

Every backend in ``BACKENDS`` runs the WHOLE contract suite. A backend joins by adding an
opener here; openers get pytest's ``request`` and ``tmp_path`` and return a fresh, empty broker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from conveyor.broker.base import Broker
from conveyor.config import Retention


def open_memory(request: Any, tmp_path: Path, retention: Retention | None) -> Broker:
    """A fresh in-memory broker."""
    from conveyor.broker.memory import MemoryBroker

    return MemoryBroker(retention)


def open_sqlite(request: Any, tmp_path: Path, retention: Retention | None) -> Broker:
    """A fresh SQLite file in the test's temp dir."""
    from conveyor.broker.sqlite import SqliteBroker

    return SqliteBroker(str(tmp_path / "contract.db"), retention)


def open_redis(request: Any, tmp_path: Path, retention: Retention | None) -> Broker:
    """A flushed database on the session's real redis-server."""
    from conveyor.broker.redis.broker import RedisBroker

    server = request.getfixturevalue("redis_server")
    broker = RedisBroker.from_url(server.url, retention)
    broker.flush_all()
    return broker


def open_postgres(request: Any, tmp_path: Path, retention: Retention | None) -> Broker:
    """A flushed schema on the session's private PostgreSQL cluster."""
    from conveyor.broker.postgres.broker import PostgresBroker

    server = request.getfixturevalue("pg_server")
    broker = PostgresBroker.from_url(server.url, retention)
    broker.flush_all()
    return broker


Opener = Callable[[Any, Path, Retention | None], Broker]
BACKENDS: dict[str, Opener] = {"memory": open_memory}


def _available(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


if _available("conveyor.broker.sqlite"):
    BACKENDS["sqlite"] = open_sqlite
if _available("psycopg") and _available("psycopg_pool"):
    BACKENDS["postgres"] = open_postgres
if _available("conveyor.broker.redis.broker"):
    BACKENDS["redis"] = open_redis
