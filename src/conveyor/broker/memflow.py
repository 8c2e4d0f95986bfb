"""Workflow storage of the memory broker: edges, nodes and counters behind the broker's lock.

``MemoryFlow`` implements ``flow.FlowOps`` over plain dicts; the broker calls ``done`` inside
its lock from every step that finishes a job (complete, bury, poison expiry, cancel), so the
dependants are released in the same atomic step (``flow.finished``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from . import flow
from .flow import FlowEdge, FlowNode, Input

if TYPE_CHECKING:
    from .memory import MemoryBroker


class MemoryFlow:
    """The workflow records of one ``MemoryBroker`` (the broker's lock guards them)."""

    def __init__(self, broker: MemoryBroker) -> None:
        self._broker = broker
        self._out: dict[str, list[tuple[str, str]]] = {}
        self._in: dict[str, list[tuple[str, str]]] = {}  # child -> (parent, policy), in order
        self._marks: dict[tuple[str, str], tuple[bool, Any]] = {}
        self._nodes: dict[str, FlowNode] = {}
        self._pending: dict[str, int] = {}
        self.members: dict[str, list[str]] = {}  # workflow id -> node ids, in enqueue order
        self._live: dict[str, int] = {}  # workflow id -> its jobs still stored (retention)
        self._now = 0.0

    def add(self, nodes: Sequence[FlowNode], edges: Sequence[FlowEdge]) -> None:
        """Store a workflow's graph (the caller stores its jobs under the same lock)."""
        for node in nodes:
            self._nodes[node.id] = node
            self._pending[node.id] = node.parents
            self.members.setdefault(node.workflow, []).append(node.id)
            self._live[node.workflow] = self._live.get(node.workflow, 0) + 1
        for edge in edges:
            self._out.setdefault(edge.parent, []).append((edge.child, edge.policy))
            self._in.setdefault(edge.child, []).append((edge.parent, edge.policy))

    def dropped(self, job_id: str) -> None:
        """Job ``job_id`` was deleted (retention, purge, delete): when it was its workflow's
        last stored job, the workflow's graph records go too. Until then every record stays,
        those of dropped parents included (their results still reach the children)."""
        node = self._nodes.get(job_id)
        if node is None:
            return
        left = self._live[node.workflow] = self._live.get(node.workflow, 1) - 1
        if left > 0:
            return
        del self._live[node.workflow]
        for member in self.members.pop(node.workflow, []):
            self._nodes.pop(member, None)
            self._pending.pop(member, None)
            for parent, _ in self._in.pop(member, ()):
                self._marks.pop((parent, member), None)
            self._out.pop(member, None)

    def edges(self, workflow: str) -> list[FlowEdge]:
        """The edges into the workflow's nodes, child by child."""
        out = []
        for child in self.members.get(workflow, []):
            for parent, policy in self._in.get(child, ()):
                out.append(FlowEdge(parent, child, policy))  # type: ignore[arg-type]
        return out

    def done(self, job: Job, now: float) -> None:
        """``job`` just reached a terminal state: release or end its dependants."""
        if job.id in self._out:
            self._now = now
            flow.done(self, job)

    # ------------------------------------------------------------------ FlowOps
    def out_edges(self, parent: str) -> Sequence[tuple[str, str]]:
        """Edges leaving ``parent``."""
        return self._out.get(parent, ())

    def mark(self, parent: str, child: str, ok: bool, result: Any) -> bool:
        """Record an edge's outcome once."""
        if (parent, child) in self._marks:
            return False
        self._marks[(parent, child)] = (ok, result)
        return True

    def node(self, child: str) -> FlowNode | None:
        """The node record."""
        return self._nodes.get(child)

    def state(self, child: str) -> JobState | None:
        """The child's state."""
        job = self._broker._jobs.get(child)
        return None if job is None else job.state

    def decrement(self, child: str) -> int:
        """One parent fewer."""
        self._pending[child] -= 1
        return self._pending[child]

    def inputs(self, child: str) -> list[Input]:
        """Parents' outcomes in edge order."""
        out = []
        for parent, policy in self._in.get(child, ()):
            ok, result = self._marks.get((parent, child), (False, None))
            out.append(Input(ok, result, policy))
        return out

    def parents(self, child: str) -> list[flow.ParentView]:
        """The child's parents now (``flow.requeue_inputs``): a completed parent's current
        result, else its edge's, else its state."""
        out = []
        for parent, policy in self._in.get(child, ()):
            job = self._broker._jobs.get(parent)
            ok, result = self._marks.get((parent, child), (False, None))
            if job is not None and job.state is JobState.COMPLETED:  # without it: no result
                ok, result = not lifecycle.result_dropped(job), job.result
            state = None if job is None else str(job.state)
            out.append(flow.ParentView(parent, policy, ok, result, state))
        return out

    def release(self, child: str, inputs: list[Any]) -> None:
        """waiting -> pending."""
        broker = self._broker
        job = broker._jobs[child]
        lifecycle.release_parents(job, self._now, inputs, flow.node_delay(job))
        broker._emit("released", job, self._now, note="parents finished")
        broker._place(job)  # pending, or scheduled for its own delay

    def upstream_failed(self, child: str, parent: str, detail: str) -> None:
        """waiting -> cancelled."""
        broker = self._broker
        job = broker._jobs[child]
        lifecycle.upstream_failed(job, self._now, parent, detail)
        broker._emit("cancelled", job, self._now, reason="upstream_failed", parent=parent)
        broker._finish(job)


class MemoryWorkflows:
    """The ``WorkflowStore`` methods of ``MemoryBroker`` (mixed in)."""

    def enqueue_workflow(
        self,
        jobs: Sequence[Job],
        payloads: Sequence[bytes],
        nodes: Sequence[FlowNode],
        edges: Sequence[FlowEdge],
        now: float,
    ) -> None:
        """Store the nodes and the graph under one lock (``WorkflowStore``)."""
        b = cast("MemoryBroker", self)
        with b._lock:
            b.enqueue(jobs, now, payloads)
            b.flow.add(nodes, edges)

    def workflow_jobs(self, workflow_id: str) -> list[Job]:
        """The workflow's stored nodes (snapshots)."""
        b = cast("MemoryBroker", self)
        with b._lock:
            ids = b.flow.members.get(workflow_id, [])
            return [b._snap(b._jobs[i]) for i in ids if i in b._jobs]

    def workflow_edges(self, workflow_id: str) -> list[FlowEdge]:
        """The workflow's edges."""
        b = cast("MemoryBroker", self)
        with b._lock:
            return b.flow.edges(workflow_id)

    def requeue_node(self, job_id: str, now: float) -> bool:
        """Requeue; a node that never got its parents' results reads them now
        (``WorkflowStore``)."""
        b = cast("MemoryBroker", self)
        with b._lock:
            job = b._jobs.get(job_id)
            fl = b.flow
            if job is None or job.state not in _REVIVABLE or fl._pending.get(job_id, 0) <= 0:
                return b.requeue(job_id, now)  # not a node waiting for results: as usual
            node = fl._nodes[job_id]
            inputs = flow.requeue_inputs(job_id, node.trigger, node.passing, fl.parents(job_id))
            lifecycle.requeue(job, now)
            job.args = [*inputs, *job.args]
            fl._pending[job_id] = 0  # it has its inputs: a later requeue keeps them
            b._emit("requeued", job, now)
            b._make_ready(job)
            return True

    def cancel_workflow(self, workflow_id: str, now: float) -> int:
        """Cancel the nodes that have not started."""
        b = cast("MemoryBroker", self)
        with b._lock:
            ids = [i for i in b.flow.members.get(workflow_id, []) if i in b._jobs]
            doomed = [i for i in ids if b._jobs[i].state in _CANCELLABLE]
            for job_id in doomed:
                b.cancel(job_id, now)  # a node cancelled by the cascade answers False
            return len(doomed)


_REVIVABLE = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)
_CANCELLABLE = (JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED, JobState.WAITING)
