"""bench/cluster_scale.py at toy size: real worker and producer processes on the real cluster."""

from __future__ import annotations

from typing import Any

import pytest

from bench import cluster_scale


def test_split_and_knee() -> None:
    assert cluster_scale.split(10, 4) == [3, 3, 2, 2]
    rows = [{"workers": n, "jobs_per_s": r} for n, r in [(1, 100.0), (2, 190.0), (4, 200.0)]]
    assert cluster_scale.knee(rows) == 2
    assert cluster_scale.knee(rows[:2]) is None  # still growing: no knee yet


@pytest.mark.parametrize("shards", [1, 3])
def test_processes_drain_a_sharded_queue_and_every_node_is_measured(
    redis_cluster: Any, shards: int
) -> None:
    url = redis_cluster.url
    ports = [n.port for n in redis_cluster.nodes]
    cluster_scale.flush(url)
    row = cluster_scale.run_processes(url, shards, ports, 60, 1, 1, 4)
    assert row["jobs"] == 60 and row["jobs_per_s"] > 0
    assert len(row["node_us_per_job"]) == 3 and row["redis_us_per_job"] > 0
    assert row["producer_us_per_job"] > 0 and row["projected_jobs_per_s"] > 0
    cluster_scale.fill(url, shards, 40)
    drained = cluster_scale.run_processes(url, shards, ports, 40, 2, 0, 4)
    assert drained["producer_us_per_job"] is None and drained["jobs_per_s"] > 0
    app = cluster_scale.make_app(url, shards)
    try:
        assert app.stats()["queues"]["hot"]["completed"] == 40
    finally:
        app.close()
