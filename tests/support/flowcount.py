"""How many flow groups a backend's claims looked at: a deterministic stand-in for timing them.

Memory, SQLite and PostgreSQL ask their limiter once per group whose head they look at
(``memlimits.MemoryLimits._admit`` / ``sqllimits.admit``), counted by wrapping it. Redis runs the
claim in Lua: a visited head costs one HMGET of its job and one per rate bucket it asks, counted
from the servers' command statistics (every node of a Redis Cluster summed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker import memlimits, sqllimits


def _hmget_calls(client: Any) -> int:
    """HMGET calls served so far by ``client``'s server (all nodes of a cluster)."""
    from redis.cluster import RedisCluster

    if isinstance(client, RedisCluster):
        per_node = client.info("commandstats", target_nodes=RedisCluster.ALL_NODES)
        stats = list(per_node.values())
    else:
        stats = [client.info("commandstats")]
    return sum(int(s.get("cmdstat_hmget", {}).get("calls", 0)) for s in stats)


def groups_looked_at(
    app: Conveyor, monkeypatch: pytest.MonkeyPatch, hmgets_per_group: int = 2
) -> Callable[[], int]:
    """A function returning how many groups ``app``'s claims looked at since this call (the
    limiter asked for their head). On Redis: HMGET calls // ``hmgets_per_group`` (one for the
    head, one per rate bucket its limits ask)."""
    broker: Any = app.broker
    if hasattr(broker, "client"):
        start = _hmget_calls(broker.client)
        return lambda: (_hmget_calls(broker.client) - start) // hmgets_per_group
    seen = [0]
    target: Any = memlimits.MemoryLimits if "Memory" in type(broker).__name__ else sqllimits
    name = "_admit" if target is memlimits.MemoryLimits else "admit"
    asked = getattr(target, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return asked(*args, **kwargs)

    monkeypatch.setattr(target, name, counted)
    return lambda: seen[0]
