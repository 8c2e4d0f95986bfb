"""Quickstart in one file: declare tasks, enqueue jobs, run them, look at the outcome.

    python examples/quickstart.py

The jobs live in ``quickstart.db`` next to this file (an absolute path, so it does not matter
where you run it from); set ``CONVEYOR_URL=redis://localhost:6379/0`` to use Redis instead. A
real deployment runs ``conveyor worker quickstart:app`` in its own process instead of
``run_until_idle()`` (see README.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from conveyor import Backoff, Conveyor, JobState, PermanentError

DB = Path(__file__).resolve().with_name("quickstart.db")
app = Conveyor(os.environ.get("CONVEYOR_URL") or f"sqlite:///{DB}")
attempts: dict[str, int] = {}


@app.task(max_attempts=3, backoff=Backoff.fixed(0))
def send_email(to: str, subject: str) -> str:
    """Sends nothing: the first try for ``flaky@`` fails, a bad address is permanent."""
    if "@" not in to:
        raise PermanentError(f"bad address {to!r}")  # no retry: straight to the dead letters
    attempts[to] = attempts.get(to, 0) + 1
    if to.startswith("flaky@") and attempts[to] == 1:
        raise ConnectionError("SMTP server busy")  # retried with backoff
    return f"sent {subject!r} to {to}"


def main() -> dict[str, JobState]:
    """Enqueue three jobs, run them all, return each job's final state."""
    jobs = {
        "ok": send_email.enqueue("ada@example.com", subject="welcome"),
        "flaky": send_email.enqueue("flaky@example.com", subject="welcome"),
        "bad": send_email.enqueue("not-an-address", subject="welcome"),
    }
    app.worker().run_until_idle()  # runs every due job (the retry too), then returns
    states = {}
    for name, handle in jobs.items():
        job = handle.refresh()
        states[name] = job.state
        print(f"{name:6} {job.state:12} attempts={job.attempts} {job.result or job.last_error}")
    return states


if __name__ == "__main__":
    main()
