"""Operator actions shared by the CLI, the dashboard and the HTTP API — every one audited.

``Operator(app, actor=..., source=...)`` wraps the app's admin calls (pause/resume queues,
cancel, retry, run now and delete jobs, bulk actions on selected jobs or on every match of a
search, bulk retry/delete of dead letters by filter, pause/resume schedules, acknowledge alerts,
enqueue by task name) and appends one entry per action to the broker log ``audit`` (newest
10,000 kept): when, who, from where, what, on what, the result. A bulk action is ONE entry
with its count and its selection (the filters, or the ids).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.job import validate_queue_name
from ..core.state import TERMINAL_STATES
from ..errors import JobNotFound, ValidationError
from ..runtime import HasRuntime, Runtime, as_runtime
from . import admin
from .inspect import Inspector

if TYPE_CHECKING:
    from ..handles import JobHandle

AUDIT_LOG = "audit"
AUDIT_CAP = 10_000
BULK_LIMIT = 10_000  # jobs one bulk action touches at most (the rest: run it again)
BULK_BATCH = 500  # search results are read this many at a time
BULK_ACTIONS = ("retry", "cancel", "delete", "run_now")
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
    ) -> JobHandle[Any]:
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
        try:
            ok = admin.requeue_dead(self.runtime, job_id)
        except ValidationError as exc:  # a workflow node whose parent has no result (says which)
            self.audit("job.retry", job_id, "refused", reason=str(exc))
            raise
        self.audit("job.retry", job_id, "ok" if ok else "refused")
        return ok

    def run_now(self, job_id: str) -> bool:
        """Make a scheduled (delayed) or retrying job due now."""
        self._require(job_id)
        ok = admin.run_now(self.runtime, job_id)
        self.audit("job.run_now", job_id, "ok" if ok else "refused")
        return ok

    def delete(self, job_id: str, *, unfinished: bool = False) -> bool:
        """Delete a finished job (dead letter, cancelled, expired or completed); with ``unfinished``
        also a pending, scheduled or retrying one (never a running one)."""
        job = self._require(job_id)
        if unfinished:
            ok = admin.delete_job(self.runtime, job_id)
            self.audit("job.delete", job_id, "ok" if ok else "refused", state=str(job.state))
            return ok
        if job.state not in TERMINAL_STATES:
            self.audit("job.delete", job_id, "refused", state=str(job.state))
            return False
        n = self.runtime.broker.purge(self.runtime.now(), state=job.state, ids=[job_id])
        self.audit("job.delete", job_id, "ok" if n else "refused")
        return n > 0

    def retry_dead(self, filters: Mapping[str, Any] | None = None) -> int:
        """Requeue every dead letter matching ``filters``; returns how many were requeued."""
        ids = self.inspector.matching_ids({**(filters or {}), "state": "dead_letter"}, BULK_LIMIT)
        done = sum(1 for job_id in ids if _requeue_or_refuse(self.runtime, job_id))
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

    def bulk(
        self,
        action: str,
        *,
        ids: Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> BulkResult:
        """Apply ``action`` (``BULK_ACTIONS``) to the jobs ``ids`` (a page's selection) or to
        every job matching ``filters`` (a search), at most ``BULK_LIMIT`` of them; one audit
        entry records the action, the count and the selection. Jobs in a state the action does
        not apply to are skipped (counted in ``matched``, not in ``done``)."""
        run = self._bulk_op(action)
        if (ids is None) == (filters is None):
            raise ValidationError("ids", "give either ids (selected jobs) or filters (a search)")
        if ids is not None:
            targets = _bulk_ids(ids)
            truncated = False
        else:
            found = self.inspector.matching_ids(filters or {}, BULK_LIMIT + 1)
            targets, truncated = found[:BULK_LIMIT], len(found) > BULK_LIMIT
        done = 0
        for start in range(0, len(targets), BULK_BATCH):
            done += sum(1 for job_id in targets[start : start + BULK_BATCH] if run(job_id))
        detail: dict[str, Any] = {"matched": len(targets)}
        if ids is not None:
            detail["ids"] = ",".join(targets)[:500]
        else:
            detail["filters"] = {k: v for k, v in (filters or {}).items() if v not in (None, "")}
        if truncated:
            detail["truncated_at"] = BULK_LIMIT
        self.audit(
            f"jobs.bulk_{action}", "selection" if ids is not None else "search", done, **detail
        )
        return BulkResult(action, len(targets), done, truncated)

    def _bulk_op(self, action: str) -> Callable[[str], bool]:
        """The unaudited one-job operation behind a bulk action."""
        rt = self.runtime
        ops: dict[str, Callable[[str], bool]] = {
            "retry": lambda job_id: _requeue_or_refuse(rt, job_id),
            "cancel": lambda job_id: admin.cancel(rt, job_id),
            "delete": lambda job_id: admin.delete_job(rt, job_id),
            "run_now": lambda job_id: admin.run_now(rt, job_id),
        }
        if action not in ops:
            raise ValidationError("action", f"must be one of {', '.join(BULK_ACTIONS)}")
        return ops[action]

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


@dataclass(frozen=True)
class BulkResult:
    """What a bulk action did: ``matched`` jobs considered, ``done`` changed; ``truncated``
    when the search had more than ``BULK_LIMIT`` matches (run the action again for the rest)."""

    action: str
    matched: int
    done: int
    truncated: bool = False


def _bulk_ids(ids: Sequence[str]) -> list[str]:
    """Selected ids: strings of 1-200 characters, duplicates dropped, at most ``BULK_LIMIT``."""
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise ValidationError("ids", "must be a list of job ids")
    out = list(dict.fromkeys(ids))
    if len(out) > BULK_LIMIT:
        raise ValidationError("ids", f"at most {BULK_LIMIT} jobs at once")
    for job_id in out:
        if not isinstance(job_id, str) or not job_id or len(job_id) > 200:
            raise ValidationError("ids", "each must be a job id (1-200 characters)")
    return out


def _clean(filters: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (filters or {}).items() if v not in (None, "") and k != "state"}


def _requeue_or_refuse(rt: Any, job_id: str) -> bool:
    """``requeue_dead`` for bulk actions: a workflow node that cannot run yet (its parent has no
    result: ``Broker.requeue_node``) counts as refused instead of stopping the batch."""
    try:
        return admin.requeue_dead(rt, job_id)
    except ValidationError:
        return False
