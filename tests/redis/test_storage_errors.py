"""Producers see Conveyor's errors, not redis-py's, when Redis refuses writes (issue 13, item 13).

A real redis-server with ``maxmemory 1mb`` and ``maxmemory-policy noeviction`` answers every
write with ``OOM command not allowed``: enqueue raises ``StorageFull`` naming the cause, nothing
is stored, and once memory is available again the same app enqueues normally.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import redis
from conveyor import Conveyor
from conveyor.errors import BrokerUnavailable, ConveyorError, StorageFull
from conveyor.task import JobSpec


def test_redis_oom_is_storage_full(make_server: Callable[..., Any]) -> None:
    server = make_server()
    app = Conveyor(server.url)
    app.enqueue("t", [0])  # scripts loaded, keys exist
    client = redis.Redis.from_url(server.url)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1mb")
    try:
        calls = [
            lambda: app.enqueue("t", [1]),
            lambda: app.enqueue("t", [2], priority=3, idempotency_key="k"),
            lambda: app.enqueue_many([JobSpec("t", (3,)), JobSpec("t", (4,))]),
        ]
        for call in calls:
            with pytest.raises(StorageFull, match="out of memory") as info:
                call()
            assert isinstance(info.value, ConveyorError)
            assert not isinstance(info.value, BrokerUnavailable)  # not retried as transient
            assert "maxmemory" in str(info.value)
    finally:
        client.config_set("maxmemory", "0")
    assert app.search().total == 1
    app.enqueue("t", [5])
    assert app.search().total == 2
    app.close()
    client.close()
