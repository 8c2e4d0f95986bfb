"""Turn a job leased by this version into one leased by the version before issue 18's run
entries: the lease fields back in the job hash (token, attempts, started_at, lease_expires_at,
worker_id), no run entry. Used by the tests of that backward compatibility."""

from __future__ import annotations

from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.codec import run_fields
from conveyor.broker.redis.keys import RUN


def make_old_lease(rbroker: RedisBroker, job_id: str, queue: str = "default") -> None:
    """Rewrite ``job_id``'s lease in the older layout (its run entry must exist)."""
    client, keys = rbroker.client, rbroker.keys
    raw = client.hget(keys.queue_key(queue, RUN), job_id)
    assert raw is not None, f"{job_id} has no run entry"
    values = run_fields(raw)
    assert values is not None
    client.hset(keys.job(queue, job_id), mapping=values)  # type: ignore[arg-type]
    client.hdel(keys.queue_key(queue, RUN), job_id)
