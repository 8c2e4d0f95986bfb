"""The aftermath of a recorded attempt: the worker's counters, one log line, the hooks.

A mixin of ``Recorder`` (``worker/recorder.py``), split out so writing outcomes and reporting
them each stay one screen. Per job: update ``processed`` / ``failed``, log ONE line (DEBUG for
successes, INFO for shutdown releases, WARNING for failures) and emit ``after_process`` (or
``on_release``); a lost lease is logged and announced (``on_lease_lost``) once per attempt.
Methods moved, not wrapped: a recorded job costs the same calls as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import LeaseLost
from ..middleware import emit
from .execute import Outcome, log_extra
from .leanlog import text_safe
from .running import Running

if TYPE_CHECKING:
    from ..broker.base import Broker
    from ..middleware import Middleware

log = logging.getLogger("conveyor.worker")


class Aftermath:
    """``after`` (counters, log line, hooks), ``release`` (shutdown) and ``lease_lost``."""

    worker: Any  # what the middleware hooks receive as ``worker``
    worker_id: str
    broker: Broker
    middleware: list[Middleware]
    now: Callable[[], float]
    processed: int
    failed: int
    _lock: threading.Lock

    def after(self, run: Running, name: str, outcome: Outcome | None) -> None:
        """Counters, the outcome log line, and the hooks, for a recorded (or released) job."""
        job, duration = run.job, run.duration()
        with self._lock:
            if name == "completed":
                self.processed += 1
            elif name != "released":
                self.failed += 1
        if name == "lease_lost":
            self.lease_lost(run)
        error = outcome.error if outcome is not None else None
        decision = outcome.decision if outcome is not None else None
        detail = f" error={decision.exc_type[:200]}: {decision.message[:200]}" if decision else ""
        level = (
            logging.DEBUG
            if name == "completed"
            else logging.INFO
            if name == "released"
            else logging.WARNING
        )
        if log.isEnabledFor(level):
            fields: dict[str, Any] = {
                "job_id": job.id,
                "task": job.task,
                "queue": job.queue,
                "attempt": job.attempts,
                "worker": self.worker_id,
                "duration": round(duration, 6),
                "outcome": name,
            }
            if decision is not None:
                fields.update(
                    error_kind=str(decision.kind),
                    error=decision.exc_type[:200],
                    message=decision.message[:500],
                )
            # job data is hostile: escaped in the message itself, so a handler without
            # Conveyor's formatters (the app's own logging set-up) still gets one safe line
            log.log(
                level,
                "job %s task=%s queue=%s attempt=%d worker=%s duration=%.3fs outcome=%s%s",
                text_safe(job.id),
                text_safe(job.task),
                text_safe(job.queue),
                job.attempts,
                self.worker_id,
                duration,
                name,
                text_safe(detail),
                extra=log_extra(fields, decision),
            )
        if name != "released":
            emit(
                self.middleware,
                "after_process",
                self.worker,
                job,
                outcome=name,
                duration=duration,
                error=error,
                reverse=True,
            )
        else:  # a released job did not finish: no after_process, its own hook
            emit(self.middleware, "on_release", self.worker, job, reverse=True)

    def release(self, run: Running, note: str) -> str:
        """Give an unfinished job back without an attempt penalty (shutdown); log it."""
        try:
            self.broker.release(run.job.id, run.token, self.now(), penalize=False, note=note)
            name = "released"
        except LeaseLost:
            name = "lease_lost"
        except Exception:
            log.exception("releasing job %s failed (its lease will expire)", run.job.id)
            name = "lease_lost"
        self.after(run, name, None)
        return name

    def lease_lost(self, run: Running) -> None:
        """Log and announce a lost lease, once per attempt."""
        with run.lock:
            if run.lost_announced:
                return
            run.lost = run.lost_announced = True
        log.warning(
            "job %s (%s): lease lost; this attempt's outcome will be discarded",
            text_safe(run.job.id),
            text_safe(run.job.task),
        )
        emit(self.middleware, "on_lease_lost", self.worker, run.job)
