"""Operator actions shared by the CLI, the dashboard and the HTTP API — every one audited.

``Operator(app, actor=..., source=...)`` wraps the app's admin calls (pause/resume queues,
cancel, retry and delete jobs, bulk retry/delete of dead letters by filter, pause/resume
schedules, acknowledge alerts, enqueue by task name) and appends one entry per action to the
broker log ``audit`` (newest 10,000 kept): when, who, from where, what, on what, the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.job import validate_queue_name
from ..core.state import JobState
from ..errors import JobNotFound, ValidationError
from ..runtime import HasRuntime, Runtime, as_runtime
from . import admin
from .inspect import Inspector

if TYPE_CHECKING:
    from ..handles import JobHandle

AUDIT_LOG = "audit"
AUDIT_CAP = 10_000
BULK_LIMIT = 10_000
ENQUEUE_OPTIONS = (
    "queue",
    "priority",
    "delay",
    "run_at",
    "max_attempts",
    "max_retries",
    "timeout",
    "idempotency_key",
    "idempotency_ttl",
    "job_id",
    "metadata",
)


class Operator:
    """Audited admin actions on behalf of ``actor`` (a user name, ``token``, ``cli``)."""

    def __init__(self, app: Runtime | HasRuntime, actor: str = "cli", source: str = "") -> None:
        self.runtime = rt = as_runtime(app)
        self.actor = actor or "anonymous"
        self.source = source
        self.inspector = Inspector(rt)

    def audit(self, action: str, target: str, result: Any, **detail: Any) -> None:
        """Append one entry to the audit log."""
        entry = {
            "at": self.runtime.now(),
            "actor": self.actor,
            "source": self.source,
            "action": action,
            "target": target,
            "result": result,
            **detail,
        }
        self.runtime.broker.logs.append(AUDIT_LOG, [entry], AUDIT_CAP)

    # ------------------------------------------------------------------ queues
    def pause_queue(self, queue: str) -> None:
        """Stop workers claiming from ``queue``."""
        admin.pause(self.runtime, queue)
        self.audit("queue.pause", queue, "ok")

    def resume_queue(self, queue: str) -> None:
        """Let workers claim from ``queue`` again."""
        admin.resume(self.runtime, queue)
        self.audit("queue.resume", queue, "ok")

    # ------------------------------------------------------------------ jobs
    def enqueue(
        self,
        task: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> JobHandle:
        """Enqueue by task name (the task need not be registered in this process)."""
        unknown = set(options) - set(ENQUEUE_OPTIONS)
        if unknown:
            raise ValidationError(
                sorted(unknown)[0], f"unknown option; use {', '.join(ENQUEUE_OPTIONS)}"
            )
        opts = {k: v for k, v in options.items() if v is not None}
        handle = self.runtime.enqueue(task, args=args, kwargs=kwargs, **opts)  # type: ignore[arg-type]
        self.audit("job.enqueue", handle.id, "duplicate" if handle.duplicate else "ok", task=task)
        return handle

    def cancel(self, job_id: str) -> bool:
        """Cancel a job: a waiting one at once, a running one by asking its worker to stop it."""
        self._require(job_id)
        ok = admin.cancel(self.runtime, job_id, by=self.actor)
        self.audit("job.cancel", job_id, "ok" if ok else "refused")
        return ok

    def retry(self, job_id: str) -> bool:
        """Requeue a dead-lettered or cancelled job with fresh attempts."""
        self._require(job_id)
        ok = admin.requeue_dead(self.runtime, job_id)
        self.audit("job.retry", job_id, "ok" if ok else "refused")
        return ok

    def delete(self, job_id: str) -> bool:
        """Delete a finished job (dead letter, cancelled or completed)."""
        job = self._require(job_id)
        if job.state not in (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.COMPLETED):
            self.audit("job.delete", job_id, "refused", state=str(job.state))
            return False
        n = self.runtime.broker.purge(self.runtime.now(), state=job.state, ids=[job_id])
        self.audit("job.delete", job_id, "ok" if n else "refused")
        return n > 0

    def retry_dead(self, filters: Mapping[str, Any] | None = None) -> int:
        """Requeue every dead letter matching ``filters``; returns how many were requeued."""
        ids = self.inspector.matching_ids({**(filters or {}), "state": "dead_letter"}, BULK_LIMIT)
        done = sum(1 for job_id in ids if admin.requeue_dead(self.runtime, job_id))
        self.audit("dlq.retry", "bulk", done, filters=_clean(filters))
        return done

    def delete_dead(self, filters: Mapping[str, Any] | None = None) -> int:
        """Delete every dead letter matching ``filters``; returns how many were deleted."""
        ids = self.inspector.matching_ids({**(filters or {}), "state": "dead_letter"}, BULK_LIMIT)
        done = self.runtime.broker.purge(self.runtime.now(), ids=ids) if ids else 0
        self.audit("dlq.delete", "bulk", done, filters=_clean(filters))
        return done

    def delete_dead_ids(self, ids: Sequence[str]) -> int:
        """Delete the dead letters among ``ids``; returns how many were deleted."""
        wanted = [i for i in ids if isinstance(i, str) and i]
        done = self.runtime.broker.purge(self.runtime.now(), ids=wanted) if wanted else 0
        self.audit("dlq.delete", ",".join(wanted)[:500], done)
        return done

    def purge_dead(self, older_than: float | None = None, queue: str | None = None) -> int:
        """Delete dead letters finished more than ``older_than`` seconds ago (all if None)."""
        if queue is not None:
            validate_queue_name(queue)
        if older_than is not None and older_than < 0:
            raise ValidationError("older_than", "must be >= 0 seconds")
        n = admin.purge_dead(self.runtime, older_than=older_than, queue=queue)
        self.audit("dlq.purge", queue or "*", n, older_than=older_than)
        return n

    # ------------------------------------------------------------------ schedules and alerts
    def pause_schedule(self, name: str) -> None:
        """Stop a schedule from firing."""
        self.runtime.schedules.set_paused(name, True)
        self.audit("schedule.pause", name, "ok")

    def resume_schedule(self, name: str) -> None:
        """Resume a paused schedule."""
        self.runtime.schedules.set_paused(name, False)
        self.audit("schedule.resume", name, "ok")

    def acknowledge(self, key: str) -> bool:
        """Acknowledge a firing alert."""
        alerts = self.runtime.alerts
        ok = alerts is not None and alerts.acknowledge(key, by=self.actor)
        self.audit("alert.acknowledge", key, "ok" if ok else "refused")
        return ok

    def _require(self, job_id: str) -> Any:
        if not isinstance(job_id, str) or not job_id or len(job_id) > 200:
            raise ValidationError("id", "must be a job id (1-200 characters)")
        job = self.runtime.broker.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job


def _clean(filters: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (filters or {}).items() if v not in (None, "") and k != "state"}
