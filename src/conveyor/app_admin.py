"""The facade's inspection and operator methods: ``get_job``, ``stats``, ``search``, ``cancel``...

A mixin of ``Conveyor`` (``app.py``), split out to keep the facade under ~400 lines. Every
method delegates to ``monitoring/admin.py`` (which the audited ``Operator`` and the
``Inspector`` call too) or reads the broker, and wraps stored jobs in ``JobHandle``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .broker.base import Broker, Page
from .core.job import validate_queue_name
from .core.state import JobState
from .errors import JobNotFound
from .handles import JobHandle
from .monitoring import admin

if TYPE_CHECKING:
    from .runtime import Runtime

#: seconds ``dequeue`` reuses the queues it found for a name (``AdminMixin.pull_members``)
MEMBERS_TTL = 1.0
_MEMBERS_MAX = 1024  # names remembered at most (the cache is dropped whole past it)


class AdminMixin:
    """Read jobs and queues, and act on them as an operator (cancel, requeue, purge, pause)."""

    runtime: Runtime
    broker: Broker  # a property of ``Conveyor``: ``runtime.broker``
    _members: dict[str, tuple[float, list[str]]]  # name -> (monotonic expiry, its queues)

    def pull_members(self, queue: str) -> list[str]:
        """The physical queues ``dequeue(queue)`` leases from: a sharded queue's shards,
        also when this process does not declare it (found among the stored queues, as
        operator actions find them: ``admin.queue_members``), then the name itself. Looked
        up at most once every ``MEMBERS_TTL`` seconds per name: it costs a broker read."""
        queue, at = validate_queue_name(queue), time.monotonic()
        cache = self._members
        hit = cache.get(queue)
        if hit is not None and hit[0] > at:
            return hit[1]
        members = admin.queue_members(self.runtime, queue)
        if len(cache) >= _MEMBERS_MAX:
            cache.clear()
        cache[queue] = (at + MEMBERS_TTL, members)
        return members

    def get_job(self, job_id: str) -> JobHandle[Any]:
        """A fresh snapshot of a job; ``JobNotFound`` if it does not exist."""
        job = self.broker.get(admin.check_job_id(job_id))
        if job is None:
            raise JobNotFound(job_id)
        return JobHandle.bind(job, self.runtime)

    def stats(self) -> dict[str, Any]:
        """Counts per queue and state, paused flags, and the live workers."""
        return admin.stats(self.runtime)

    def workers(self) -> list[dict[str, Any]]:
        """Heartbeat records of live workers."""
        return admin.workers(self.runtime)

    def peek(self, queue: str, n: int = 10) -> list[JobHandle[Any]]:
        """The next ``n`` ready jobs of a queue, in the order workers would take them (a
        sharded queue: of each shard in turn)."""
        n = admin.check_count(n, "n", top=2**31)
        members = admin.queue_members(self.runtime, validate_queue_name(queue))
        jobs = [j for q in members for j in self.broker.peek(q, n)][:n]
        return [JobHandle.bind(j, self.runtime) for j in jobs]

    def search(
        self,
        *,
        id: str | None = None,
        state: JobState | str | None = None,
        task: str | None = None,
        queue: str | None = None,
        since: float | None = None,
        until: float | None = None,
        error: str | None = None,
        text: str | None = None,
        page: int = 1,
        page_size: int = 50,
    ) -> Page:
        """Search stored jobs (newest first) with filters and pagination."""
        return admin.search(
            self.runtime,
            id=id,
            state=state,
            task=task,
            queue=queue,
            since=since,
            until=until,
            error=error,
            text=text,
            page=page,
            page_size=page_size,
        )

    def dead_letters(self, queue: str | None = None, limit: int = 100) -> list[JobHandle[Any]]:
        """Dead-lettered jobs, newest first."""
        limit = admin.check_count(limit, "limit", top=2**31)  # more than 1000: the first 1000
        page = self.search(state=JobState.DEAD_LETTER, queue=queue, page_size=min(limit, 1000))
        return [JobHandle.bind(j, self.runtime) for j in page.items]

    def cancel(self, job_id: str) -> bool:
        """Cancel a job: a waiting one at once; a RUNNING one is stopped by the worker holding
        its lease (within about a second) and ends ``cancelled``, never retried. False if it
        is finished or unknown (see docs/operations.md)."""
        return admin.cancel(self.runtime, job_id)

    def requeue_dead(self, job_id: str) -> bool:
        """Run a dead-lettered (or cancelled) job again with fresh attempts."""
        return admin.requeue_dead(self.runtime, job_id)

    def purge_dead(self, older_than: float | None = None, queue: str | None = None) -> int:
        """Delete dead letters finished more than ``older_than`` seconds ago (all if None)."""
        return admin.purge_dead(self.runtime, older_than=older_than, queue=queue)

    def pause(self, queue: str) -> None:
        """Workers stop claiming from ``queue`` (running jobs finish)."""
        admin.pause(self.runtime, queue)

    def resume(self, queue: str) -> None:
        """Undo ``pause``."""
        admin.resume(self.runtime, queue)
