"""What a SQL transaction (SQLite's and PostgreSQL's ``Tx``) settles before COMMIT: the
per-(queue, state) count deltas and the job events, gathered while its statements run."""

from __future__ import annotations

from typing import Any

from ..core.job import Job


class Ledger:
    """``count`` and ``emit`` over ``deltas`` and ``events`` (set up by the transaction)."""

    events: list[dict[str, Any]]
    deltas: dict[tuple[str, str], int]

    def count(self, queue: str, old: str | None, new: str | None, n: int = 1) -> None:
        """Record ``n`` jobs moving between states (None: inserted / deleted) for ``counts``."""
        if old != new:
            for state, step in ((old, -n), (new, n)):
                if state is not None:
                    self.deltas[queue, state] = self.deltas.get((queue, state), 0) + step

    def emit(self, kind: str, job: Job, now: float, **extra: Any) -> None:
        """Queue one job event for insertion at commit."""
        self.events.append(
            {"type": kind, "job_id": job.id, "queue": job.queue, "task": job.task, "at": now}
            | extra
        )
