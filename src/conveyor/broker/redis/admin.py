"""Operator actions of the Redis broker that act on one job by id: ``run_now`` and
``delete_job``, each one Lua script on the job's queue (atomic against a claiming worker)."""

from __future__ import annotations

from .codec import fmt_time
from .codes import ScriptCode
from .plumbing import RedisBase, guarded


class JobAdminMixin(RedisBase):
    """``run_now`` and ``delete_job`` of ``RedisBroker``."""

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
    def delete_job(self, job_id: str, now: float) -> bool:
        """Delete a job that is not running (delete_job.lua)."""
        found = self.fetch(job_id)
        if found is None:
            return False
        return bool(self.runner.run("delete_job", self.qkeys(found[0]), [job_id]) == ScriptCode.OK)
