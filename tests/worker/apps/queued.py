"""A test app whose tasks declare their own queues (issue 19 item 4): ``emails`` and ``reports``.

The broker URL comes from ``CONVEYOR_URL``; ``WORKER_TEST_LOG`` names the marks file.
"""

from __future__ import annotations

import os

from conveyor import Conveyor
from tests.worker.apps.jobs import mark

# the workers get CONVEYOR_URL; imported by the test process itself (for its task objects)
# without one, it must not create the embedded default conveyor.db in the working directory
app = Conveyor(os.environ.get("CONVEYOR_URL") or "memory://")


@app.task(queue="emails")
def send_email(tag: str) -> str:
    """Record that the job ran."""
    mark("start", tag)
    return tag


@app.task(queue="reports")
def build_report(tag: str) -> str:
    """Record that the job ran."""
    mark("start", tag)
    return tag


@app.task
def plain(tag: str) -> str:
    """A job on the default queue."""
    mark("start", tag)
    return tag
