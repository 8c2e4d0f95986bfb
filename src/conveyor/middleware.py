"""Middleware: hooks around enqueue and processing where metrics, logs and extensions plug in.

Hooks run in registration order ("before" hooks) and in reverse order ("after" hooks), as in
Dramatiq. A hook that raises is logged and skipped: a broken extension never kills a worker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.job import Job

log = logging.getLogger("conveyor.middleware")


class Middleware:
    """Base class: override the hooks you need; all are no-ops by default."""

    def before_enqueue(self, app: Any, job: Job) -> None:
        """A job is about to be stored (raise ValidationError to refuse it)."""

    def after_enqueue(self, app: Any, job: Job, duplicate: bool) -> None:
        """A job was stored (or matched an idempotency key)."""

    def before_process(self, worker: Any, job: Job) -> None:
        """A claimed job is about to run."""

    def after_process(
        self, worker: Any, job: Job, *, outcome: str, duration: float, error: BaseException | None
    ) -> None:
        """A job ran; ``outcome`` is completed, retry_scheduled, dead_letter or lease_lost."""

    def on_retry(self, worker: Any, job: Job, retry_at: float) -> None:
        """A failed job will run again at ``retry_at``."""

    def on_dead_letter(self, worker: Any, job: Job, reason: str) -> None:
        """A job went to the dead-letter queue."""

    def on_lease_lost(self, worker: Any, job: Job) -> None:
        """The worker lost the lease of a job; its outcome was discarded."""

    def on_worker_start(self, worker: Any) -> None:
        """A worker started."""

    def on_worker_stop(self, worker: Any) -> None:
        """A worker stopped."""


def emit(middleware: list[Middleware], hook: str, *args: Any, reverse: bool = False,
         **kwargs: Any) -> None:  # fmt: skip
    """Call ``hook`` on every middleware; exceptions are logged, never propagated."""
    chain = reversed(middleware) if reverse else middleware
    for mw in chain:
        try:
            getattr(mw, hook)(*args, **kwargs)
        except Exception:
            log.exception("middleware %s.%s failed", type(mw).__name__, hook)
