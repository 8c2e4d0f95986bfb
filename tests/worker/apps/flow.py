"""A test app for flow control (issue 15): tasks record each start and end in an O_APPEND
ledger (``WORKER_TEST_LOG``, one JSON line per event, written by ``jobs.mark``)."""

from __future__ import annotations

import os
import time

from conveyor import ConcurrencyLimit, Conveyor
from tests.worker.apps.jobs import mark

# the workers get CONVEYOR_URL; imported by the test process itself (for its task objects)
# without one, it must not create the embedded default conveyor.db in the working directory
app = Conveyor(os.environ.get("CONVEYOR_URL") or "memory://")


@app.task(name="flow.rated", queue="rated", rate_limit="10/s")
def rated(tag: str) -> None:
    """At most 10 starts a second across every worker (burst 10)."""
    mark("start", tag)


@app.task(name="flow.exclusive", queue="exclusive", concurrency=ConcurrencyLimit(1, key="key"))
def exclusive(key: str, tag: str, seconds: float) -> None:
    """At most one running per key, anywhere."""
    mark("start", tag, key=key)
    time.sleep(seconds)
    mark("end", tag, key=key)
