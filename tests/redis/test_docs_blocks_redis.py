"""The Python blocks of docs/*.md that need Redis run as written on the real redis-server (or
the 3-node cluster), only their server addresses and paths swapped (tests/examples/docblocks.py)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from conveyor import Conveyor
from conveyor.relay import Relay
from tests.examples.docblocks import run

CLUSTER_URL = "redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000"


def test_scaling_sharded_queues_on_a_cluster(redis_cluster: Any) -> None:
    ns: dict[str, Any] = {"Conveyor": Conveyor}
    run("scaling.md", f'app = Conveyor("{CLUSTER_URL}")', ns, {CLUSTER_URL: redis_cluster.url})
    app = ns["app"]
    app.broker.flush_all()
    try:
        queues = {ns["track"].enqueue({"n": i}).refresh().queue for i in range(12)}
        shards = {re.fullmatch(r"events\.shard(\d)(\.\d+)?", q).group(1) for q in queues}  # type: ignore[union-attr]
        assert shards == set("012345")  # round-robin over the six (docs/scaling.md: names)
    finally:
        app.broker.flush_all()
        app.close()


def test_transactions_outbox_on_redis(redis_server: Any, tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:  # the reader's own table
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    ns: dict[str, Any] = {}
    run(
        "transactions.md",
        "from conveyor import Conveyor",
        ns,
        {
            "redis://localhost:6379/0": redis_server.url,
            '"postgresql://shop@db/shop"': f'"sqlite:///{path}"',
            '"postgresql+psycopg://shop@db/shop"': f'"sqlite:///{path}"',
        },
    )
    app = ns["app"]
    app.broker.flush_all()
    with sqlite3.connect(path) as conn:  # committed with the order, not in Redis yet
        assert conn.execute("SELECT count(*) FROM conveyor_outbox").fetchone() == (1,)
    assert app.broker.counts() == {}
    assert Relay(ns["outbox"]).relay_once() == 1
    assert app.broker.counts()["default"]["pending"] == 1
    app.broker.flush_all()
    app.close()
