"""Fixtures of the Redis-specific tests: a flushed broker on the session server, private servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.broker.redis import RedisBroker
from conveyor.config import Retention
from tests.support import redis_proc

T0 = 1_700_000_000.0


@pytest.fixture
def rbroker(redis_server: Any) -> Iterator[RedisBroker]:
    """A flushed RedisBroker on the session's redis-server."""
    broker = RedisBroker.from_url(redis_server.url)
    broker.flush_all()
    yield broker
    broker.close()


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., redis_proc.RedisServer]]:
    """Start private redis-servers (own port and dir); all are stopped at teardown."""
    started: list[redis_proc.RedisServer] = []

    def make(**options: Any) -> redis_proc.RedisServer:
        server = redis_proc.RedisServer(tmp_path / f"redis{len(started)}", **options)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()


def small_retention(**overrides: Any) -> Retention:
    """Retention with small caps, for tests."""
    values: dict[str, Any] = {"completed_max": 100, "dead_letter_max": 100, "events_max": 200}
    values.update(overrides)
    return Retention(**values)
