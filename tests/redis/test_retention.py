"""Retention keeps Redis bounded: 50,000 jobs through a small retention, keys and memory flat."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import redis
from conveyor.broker.base import Ack
from conveyor.broker.redis import RedisBroker
from conveyor.core.ids import new_ulid
from conveyor.core.job import Job

from .conftest import T0, small_retention

TOTAL = 50_000
BATCH = 500


def _kinds(client: redis.Redis) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in client.scan_iter(match="conveyor:*", count=1000):
        text = key.decode()
        kind = "job" if ":job:" in text else "idem" if ":idem:" in text else "other"
        out[kind] = out.get(kind, 0) + 1
    return out


def test_fifty_thousand_jobs_keep_keys_and_memory_bounded(make_server: Callable[..., Any]) -> None:
    server = make_server()
    retention = small_retention(completed_max=100, completed_ttl=5.0, events_max=200)
    broker = RedisBroker.from_url(server.url, retention)
    client = redis.Redis(port=server.port)
    rng = random.Random(5)
    now = T0
    processed = 0
    samples: list[tuple[int, int]] = []  # (job + fixed keys, used_memory) every 5,000 jobs
    while processed < TOTAL:
        jobs = [
            Job(
                id=new_ulid(now, rng),
                task="t",
                args=[processed + i, "x" * 100],
                run_at=now,
                created_at=now,
                idempotency_key=f"k{processed + i}",
                idempotency_ttl=0.2,
            )
            for i in range(BATCH)
        ]
        broker.enqueue(jobs, now)
        while leases := broker.claim(["default"], now, limit=250, worker_id="w"):
            assert all(broker.complete([Ack(x.id, x.token, {"n": 1}) for x in leases], now))
            processed += len(leases)
        now += 0.5
        if processed % 5000 == 0:
            broker.reap_expired(now)
            kinds = _kinds(client)
            samples.append(
                (
                    kinds.get("job", 0) + kinds.get("other", 0),
                    int(client.info("memory")["used_memory"]),
                )
            )
    broker.reap_expired(now + 10)
    kinds = _kinds(client)
    assert kinds.get("job", 0) <= 100, kinds  # completed_max / completed_ttl
    assert kinds.get("other", 0) <= 20, kinds  # the fixed per-queue and global keys
    assert client.xlen("conveyor:{default}:events") <= 200 + 200, "stream capped (MAXLEN ~)"
    deadline = time.monotonic() + 10
    while _kinds(client).get("idem", 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)  # dedup keys expire in real time: poll with a deadline
    assert _kinds(client).get("idem", 0) == 0
    _, warm_memory = samples[1]
    _, end_memory = samples[-1]
    assert max(k for k, _ in samples) <= 100 + BATCH + 20, samples
    assert end_memory - warm_memory < 4 * 1024 * 1024, samples
    assert end_memory < 32 * 1024 * 1024, samples
    broker.close()
