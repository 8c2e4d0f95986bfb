"""``WorkflowHandle``: what enqueueing a workflow returns: status, result, cancel."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..core.job import ErrorKind, Job
from ..core.lifecycle import result_dropped
from ..core.state import TERMINAL_STATES, JobState
from ..errors import ConveyorError, JobNotFound, WaitTimeout
from ..handles import wait_limit

if TYPE_CHECKING:
    from .host import FlowHost


class WorkflowFailed(ConveyorError):
    """A workflow's last step did not complete: ``job`` is the first node that failed."""

    def __init__(self, workflow_id: str, job: Job) -> None:
        self.workflow_id = workflow_id
        self.job = job
        how = "completed without its result" if result_dropped(job) else str(job.state)
        super().__init__(f"workflow {workflow_id}: job {job.id} ({job.task}) {how}")


class WorkflowPending(ConveyorError):
    """``result()`` was asked before the last step finished."""


class WorkflowHandle:
    """A stored workflow: its id, node ids and last steps (``sinks``)."""

    def __init__(
        self,
        runtime: FlowHost,
        workflow_id: str,
        ids: list[str],
        sinks: list[str],
        queues: dict[str, str] | None = None,
    ):
        self._rt = runtime
        self.id = workflow_id
        self.ids = ids
        self.sinks = sinks
        self._queues = queues or {}  # sink id -> queue (where ``watch`` listens)

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.id} nodes={len(self.ids)}>"

    def jobs(self) -> list[Job]:
        """Every node still stored, in enqueue order."""
        return self._rt.broker.workflow_jobs(self.id)

    def status(self) -> dict[str, int]:
        """How many nodes are in each state (every ``JobState``, plus ``total``)."""
        counts = Counter(str(j.state) for j in self.jobs())
        out = {str(s): counts.get(str(s), 0) for s in JobState}
        out["total"] = len(self.ids)
        return out

    def done(self) -> bool:
        """True when every last step is in a terminal state, or no longer stored: a node is
        dropped (retention, purge, delete) only once it finished."""
        jobs = {j.id: j for j in self.jobs()}
        return all(i not in jobs or jobs[i].state in TERMINAL_STATES for i in self.sinks)

    def result(self) -> Any:
        """The last step's result (a list for several last steps); raises ``WorkflowFailed``
        naming the first failed node, or ``WorkflowPending`` when not finished yet. A last
        step completed without its result (it could not be stored) is a failure, as for
        ``job.wait()``; one no longer stored (dropped by retention once finished) raises
        ``JobNotFound``, as ``job.wait()`` does."""
        jobs = {j.id: j for j in self.jobs()}
        failed = [j for j in jobs.values() if j.state in (JobState.DEAD_LETTER,)]
        last = [jobs.get(i) for i in self.sinks]
        if any(j is None or j.state is not JobState.COMPLETED for j in last):
            ended = [j for j in last if j is not None and j.state in TERMINAL_STATES]
            if failed:
                raise WorkflowFailed(self.id, failed[0])
            gone = [i for i, j in zip(self.sinks, last, strict=True) if j is None]
            if len(ended) + len(gone) == len(last):  # every last step finished
                bad = [j for j in ended if j.state is not JobState.COMPLETED]
                if bad:
                    raise WorkflowFailed(self.id, _cause(bad[0], jobs))
                raise JobNotFound(gone[0])
            raise WorkflowPending(f"workflow {self.id} has not finished")
        dropped = [j for j in last if j is not None and result_dropped(j)]
        if dropped:
            raise WorkflowFailed(self.id, dropped[0])
        results = [j.result for j in last if j is not None]
        return results[0] if len(results) == 1 else results

    def wait(self, timeout: float | None = None) -> Any:
        """Block until every last step finished; return ``result()``. Raises
        ``WorkflowFailed`` if a step failed, ``WaitTimeout`` after ``timeout`` seconds
        (checked as ``JobHandle.wait`` checks it: ``ValidationError`` naming it). Uses
        the broker's wake-ups (``Broker.watch``: condition, ``data_version``, event stream)."""
        limit = wait_limit(timeout)  # checked as JobHandle.wait checks it
        end = time.monotonic() + limit
        for sink in self.sinks:
            left = max(0.0, end - time.monotonic())
            job = self._rt.broker.watch(sink, self._queues.get(sink, "default"), left)
            if job is not None and job.state not in TERMINAL_STATES:
                raise WaitTimeout(sink, limit, str(job.state))
        return self.result()

    async def wait_async(self, timeout: float | None = None) -> Any:
        """``wait`` for async code (never blocks the event loop: the waits are the broker's
        ``watch_async`` and the final read of the results runs on a worker thread)."""
        limit = wait_limit(timeout)  # checked as JobHandle.wait checks it
        end = time.monotonic() + limit
        for sink in self.sinks:
            left = max(0.0, end - time.monotonic())
            queue = self._queues.get(sink, "default")
            job = await self._rt.broker.watch_async(sink, queue, left)
            if job is not None and job.state not in TERMINAL_STATES:
                raise WaitTimeout(sink, limit, str(job.state))
        return await asyncio.to_thread(self.result)  # reads every node: a broker round trip

    def cancel(self) -> int:
        """Cancel every node that has not started; returns how many."""
        return self._rt.broker.cancel_workflow(self.id, self._rt.now())


def _cause(job: Job, jobs: dict[str, Job]) -> Job:
    """The node whose end ended ``job``: up the ``upstream_failed`` entries' parents."""
    seen = {job.id}
    while job.state is JobState.CANCELLED and job.errors:
        last = job.errors[-1]
        if not isinstance(last, dict) or last.get("kind") != ErrorKind.UPSTREAM_FAILED.value:
            break
        parent = jobs.get(str(last.get("parent")))
        if parent is None or parent.id in seen:
            break
        seen.add(parent.id)
        job = parent
    return job
