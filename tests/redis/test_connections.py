"""Deployment shapes and idle waiting: ACL users, TLS, Sentinel, blocking wake-ups, pools."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import redis
from conveyor import BrokerAuthError
from conveyor.broker.base import Ack
from conveyor.broker.redis import RedisBroker
from conveyor.core.job import Job
from tests.support.redis_proc import RedisSentinel

from .conftest import T0


def _roundtrip(broker: RedisBroker, job_id: str = "j1") -> None:
    broker.flush_all()
    broker.enqueue([Job(id=job_id, task="t", run_at=T0, created_at=T0)], T0)
    lease = broker.claim(["default"], T0)[0]
    assert broker.complete([Ack(lease.id, lease.token, 7)], T0) == [True]
    job = broker.get(job_id)
    assert job is not None and job.result == 7


def _blocked_clients(port: int) -> int:
    return int(redis.Redis(port=port).info("clients")["blocked_clients"])


def test_idle_wait_blocks_on_redis_and_wakes_within_milliseconds(
    make_server: Callable[..., Any],
) -> None:
    server = make_server()
    broker = RedisBroker.from_url(server.url)
    broker.queues()  # connect (and run the start-up checks) before timing anything
    woke: list[float] = []
    waiter = threading.Thread(
        target=lambda: (
            broker.wait_for_work(["mail", "default"], 30.0),
            woke.append(time.monotonic()),
        )
    )
    waiter.start()
    deadline = time.monotonic() + 5
    while _blocked_clients(server.port) == 0:  # poll, with a deadline, until it blocks
        assert time.monotonic() < deadline, "wait_for_work did not block on Redis"
        time.sleep(0.005)
    sent = time.monotonic()
    broker.enqueue([Job(id="x", task="t", queue="mail", run_at=T0, created_at=T0)], T0)
    waiter.join(35)
    assert woke and woke[0] - sent < 5.0  # the enqueue woke it, not its 30 s timeout (load)
    # with nothing to do, it returns after the timeout, with one BLPOP (no busy loop)
    client = redis.Redis(port=server.port)
    client.config_resetstat()
    began = time.monotonic()
    broker.wait_for_work(["default"], 0.3)
    assert 0.25 <= time.monotonic() - began < 2.0
    assert client.info("commandstats")["cmdstat_blpop"]["calls"] == 1
    broker.close()


def test_one_shared_pool_per_url_per_process(make_server: Callable[..., Any]) -> None:
    server = make_server()
    brokers = [RedisBroker.from_url(server.url) for _ in range(5)]
    for b in brokers:
        b.queues()
    assert len({id(b.client) for b in brokers}) == 1
    clients = redis.Redis(port=server.port).client_list()
    assert sum(1 for c in clients if c.get("name") == "conveyor") <= 2
    for b in brokers:
        b.close()


def test_acl_user_and_password_in_the_url(make_server: Callable[..., Any]) -> None:
    server = make_server(extra=["--user", "alice", "on", ">s3cret", "~*", "&*", "+@all"])
    good = RedisBroker.from_url(f"redis://alice:s3cret@127.0.0.1:{server.port}/0")
    _roundtrip(good)
    good.close()
    bad = RedisBroker.from_url(f"redis://alice:wrong@127.0.0.1:{server.port}/0")
    with pytest.raises(BrokerAuthError):  # permanent: not BrokerUnavailable (issue 13, 8)
        bad.queues()
    bad.close()


def test_rediss_tls(make_server: Callable[..., Any]) -> None:
    server = make_server(tls=True)
    broker = RedisBroker.from_url(server.url)
    assert server.url.startswith("rediss://")
    _roundtrip(broker)
    broker.close()


def test_sentinel_url(make_server: Callable[..., Any], tmp_path: Path) -> None:
    master = make_server()
    sentinel = RedisSentinel(tmp_path / "sentinel", master.port).start()
    try:
        broker = RedisBroker.from_url(f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster/0")
        _roundtrip(broker)
        assert redis.Redis(port=master.port).exists("conveyor:{default}:job:j1")
        broker.close()
    finally:
        sentinel.stop()


def test_prefix_option_separates_apps(redis_server: Any) -> None:
    a = RedisBroker.from_url(redis_server.url.replace("/0", "/0?prefix=appa"))
    b = RedisBroker.from_url(redis_server.url.replace("/0", "/0?prefix=appb"))
    a.flush_all()
    b.flush_all()
    a.enqueue([Job(id="only-a", task="t", run_at=T0, created_at=T0)], T0)
    assert a.get("only-a") is not None and b.get("only-a") is None
    assert redis.Redis(port=redis_server.port).exists("appa:{default}:job:only-a")
    a.flush_all()
    a.close()
    b.close()
