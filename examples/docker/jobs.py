"""The app the Docker example runs: ``conveyor worker|scheduler|dashboard jobs:app``.

The broker comes from ``CONVEYOR_URL`` (compose.yaml points it at its Redis service).
"""

from __future__ import annotations

import os

from conveyor import Conveyor

app = Conveyor(os.environ.get("CONVEYOR_URL", "redis://redis:6379/0"))


@app.task(max_attempts=5)
def send_welcome(email: str) -> str:
    """A stand-in for real work."""
    return f"welcome mail sent to {email}"


@app.every(60, name="heartbeat-report")
def heartbeat_report() -> None:
    """A schedule, so the scheduler service has something to fire."""
    send_welcome.enqueue("ops@example.com")
