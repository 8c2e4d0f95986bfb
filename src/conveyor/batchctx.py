"""The batch open in this context (``with app.batch(...)``), read by the producer on every store.

Kept apart from ``conveyor.workflow.batch`` so the producer imports nothing of the workflow
package (no import loop through the runtime).
"""

from __future__ import annotations

import contextvars
from typing import Any, Protocol


class Collector(Protocol):
    """An open batch: keeps the jobs its app enqueues until its block ends."""

    def collect(self, runtime: Any, jobs: list[Any], connection: Any = None) -> list[Any] | None:
        """The jobs, kept (None: another app's enqueue, store it as usual). ``connection``:
        the caller's transaction the jobs were meant for (joins only a batch stored in it)."""
        ...


current_batch: contextvars.ContextVar[Collector | None] = contextvars.ContextVar(
    "conveyor_batch", default=None
)
