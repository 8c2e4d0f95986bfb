"""A worker of a sharded queue on a single (non-Cluster) Redis skips the shards its last claims
left empty (broker/redis/idlequeues.py, issue 18): a trickle costs about one claim script per
job, not one per shard. The wait pops the woken queue's own marker, so it tells the skip list
which queue that was (that queue is read, whatever its wake list now holds)."""

from __future__ import annotations

import pytest

from conveyor.broker.redis import RedisBroker
from tests.redis.shard_trickle import trickle


def test_a_claim_round_on_a_single_redis_skips_shards_left_empty(
    rbroker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims, late = trickle(rbroker, 4, monkeypatch)
    # before: each wake-up read all 5 queues (4 shards and the logical name): 50 calls
    assert claims <= 10 + 2, claims
    assert -0.05 < late < 0.5, f"the delayed job started {late:.3f}s after its due time"
