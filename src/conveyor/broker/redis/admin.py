"""Actions of the Redis broker on one job by id: ``cancel``, ``requeue``, ``run_now``,
``delete_job`` and ``replace_waiting`` (``debounce``), each one Lua script on the job's queue
(atomic against a claiming worker)."""

from __future__ import annotations

from collections.abc import Callable

from ...core.job import Job
from . import codec
from .codec import fmt_time
from .codes import ScriptCode, options
from .plumbing import RedisBase, guarded


class JobAdminMixin(RedisBase):
    """``cancel``, ``requeue``, ``run_now``, ``delete_job`` and ``replace_waiting`` of
    ``RedisBroker``."""

    get: Callable[[str], Job | None]  # the broker's read of one job

    @guarded
    def cancel(self, job_id: str, now: float) -> bool:
        """Cancel a job that has not started."""
        found = self.fetch(job_id)
        if found is None:
            return False
        queue = found[0]
        args = [queue, job_id, fmt_time(now), self.retention.events_max]
        return bool(self.runner.run("cancel", self.qkeys(queue), args) == ScriptCode.OK)

    @guarded
    def requeue(self, job_id: str, now: float) -> bool:
        """Revive a dead-lettered or cancelled job with fresh attempts."""
        found = self.fetch(job_id)
        if found is None:
            return False
        queue = found[0]
        args = [queue, job_id, fmt_time(now), self.retention.events_max]
        ok = self.runner.run("requeue", self.qkeys(queue), args) == ScriptCode.OK
        if ok:
            self.wake_all()
        return bool(ok)

    @guarded
    def run_now(self, job_id: str, now: float) -> bool:
        """A scheduled or retrying job becomes pending now (run_now.lua)."""
        found = self.fetch(job_id)
        if found is None:
            return False
        queue = found[0]
        ok = self.runner.run("run_now", self.qkeys(queue), [job_id, fmt_time(now)])
        if ok == ScriptCode.OK:
            self.wake_all()
        return bool(ok == ScriptCode.OK)

    @guarded
    def replace_waiting(self, job_id: str, job: Job, now: float) -> bool:
        """``debounce`` (issue 15): newest arguments; a scheduled job's delay restarts."""
        found = self.fetch(job_id)
        if found is None:
            return False
        stored = self.get(job_id)
        if stored is None:
            return False
        stored.args, stored.kwargs, stored.metadata = job.args, job.kwargs, job.metadata
        payload = codec.envelope(stored)
        opts = options(
            id=job_id, now=fmt_time(now), run_at=fmt_time(job.run_at), payload=payload.decode()
        )
        ok = self.runner.run("debounce", self.qkeys(found[0]), [opts])
        return bool(ok == ScriptCode.OK)

    @guarded
    def delete_job(self, job_id: str, now: float) -> bool:
        """Delete a job that is not running (delete_job.lua)."""
        found = self.fetch(job_id)
        if found is None:
            return False
        queue, fields = found
        key = self.decode_lenient(fields, queue, job_id).idempotency_key or ""  # released too
        reply = self.runner.run("delete_job", self.qkeys(queue), [job_id, key])
        return bool(reply == ScriptCode.OK)
