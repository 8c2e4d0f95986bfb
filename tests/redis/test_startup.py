"""Start-up checks: warn about eviction and missing persistence, refuse Redis older than 6.2."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from conveyor import ValidationError
from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.conn import check_server


def test_warns_on_eviction_policy_and_missing_persistence(
    make_server: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(extra=["--maxmemory-policy", "allkeys-lru"])
    broker = RedisBroker.from_url(server.url)
    with caplog.at_level(logging.WARNING, logger="conveyor.redis"):
        broker.queues()
    text = caplog.text
    assert "maxmemory-policy is 'allkeys-lru'" in text and "noeviction" in text
    assert "persistence is off" in text
    broker.close()


def test_no_warning_with_noeviction_and_aof(
    make_server: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(aof=True)
    broker = RedisBroker.from_url(server.url)
    with caplog.at_level(logging.WARNING, logger="conveyor.redis"):
        broker.queues()
    assert caplog.records == []
    broker.close()


def test_refuses_redis_older_than_6_2() -> None:
    with pytest.raises(ValidationError, match=r"Redis 6\.0\.16 is too old.*6\.2"):
        check_server({"redis_version": "6.0.16"}, "3600 1")
    assert (
        check_server(
            {"redis_version": "6.2.0", "maxmemory_policy": "noeviction", "aof_enabled": 1}, ""
        )
        == []
    )
    assert check_server({"redis_version": "7.2.4", "aof_enabled": 0}, "3600 1") == []
    warnings = check_server({"redis_version": "7.2.4", "aof_enabled": 0}, "")
    assert len(warnings) == 1 and "persistence is off" in warnings[0]
