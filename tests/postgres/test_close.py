"""A closed ``PostgresBroker`` (``app.close()``) takes no more late writes from its app's
background parts: metrics buffered for it are dropped, as on Redis, instead of reopening the
pool and landing in the schema another app (the next test, a new deploy) now uses."""

from __future__ import annotations

import time
from typing import Any

from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.monitoring.metrics import MetricsMiddleware, read_counters


def test_metrics_buffered_for_a_closed_broker_are_dropped(pg_server: Any) -> None:
    first = PostgresBroker.from_url(pg_server.url)
    first.flush_all()
    now = time.time()
    metrics = MetricsMiddleware(flush_interval=60)
    metrics.add(first, now, "q", "t", {"processed": 1.0})
    first.close()
    metrics.flush()  # the timer of an app closed a moment ago
    second = PostgresBroker.from_url(pg_server.url)
    try:
        assert read_counters(second, now, 1) == {}
        assert first._pool is None, "the closed broker did not reopen its pool"
    finally:
        second.close()
