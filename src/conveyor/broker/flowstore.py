"""The workflow part of the Broker protocol: store a graph atomically, read it, cancel it.

A backend without workflows keeps the defaults (they raise ``NotImplementedError``); the
memory, SQLite, PostgreSQL and Redis brokers implement them (docs/workflows.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.job import Job
from .flow import FlowEdge, FlowNode


class WorkflowStore:
    """Workflow methods every ``Broker`` has (mixed into ``JobStore``)."""

    def enqueue_workflow(
        self,
        jobs: Sequence[Job],
        payloads: Sequence[bytes],
        nodes: Sequence[FlowNode],
        edges: Sequence[FlowEdge],
        now: float,
    ) -> None:
        """Store every node (jobs: ``waiting`` if they have parents) and edge, or nothing.

        ``payloads`` are the jobs' encoded envelopes. Ids are fresh; nodes carry no
        idempotency key (the producer refuses one), so nothing is ever a duplicate.
        """
        raise NotImplementedError(f"{type(self).__name__} does not store workflows")

    #: True where ``enqueue_workflow_in_transaction`` works (SQLite, PostgreSQL: sqlflow.py)
    workflows_in_transaction = False

    def enqueue_workflow_in_transaction(
        self,
        connection: Any,
        jobs: Sequence[Job],
        payloads: Sequence[bytes],
        nodes: Sequence[FlowNode],
        edges: Sequence[FlowEdge],
        now: float,
    ) -> None:
        """``enqueue_workflow`` with the caller's DB-API ``connection``, inside its open
        transaction (a batch opened with ``connection=``; docs/transactions.md)."""
        raise NotImplementedError(f"{type(self).__name__} cannot store workflows in a transaction")

    def workflow_jobs(self, workflow_id: str) -> list[Job]:
        """Every node of the workflow still stored, in enqueue order (empty if unknown)."""
        raise NotImplementedError(f"{type(self).__name__} does not store workflows")

    def workflow_edges(self, workflow_id: str) -> list[FlowEdge]:
        """Every edge of the workflow (for the dashboard's graph)."""
        raise NotImplementedError(f"{type(self).__name__} does not store workflows")

    def cancel_workflow(self, workflow_id: str, now: float) -> int:
        """Cancel every node that has not started (waiting, pending, scheduled, retry); their
        dependants end as after any cancellation. Running nodes finish. Returns how many."""
        raise NotImplementedError(f"{type(self).__name__} does not store workflows")

    def requeue_node(self, job_id: str, now: float) -> bool:
        """``requeue`` for a workflow node: one that never got its parents' results (it ended
        ``upstream_failed`` or was cancelled while waiting) gets them now, read again in the
        same atomic step (``flow.requeue_inputs``; a ``ValidationError`` names a parent
        without a result); any other job is requeued as usual. This default (a backend
        without workflows) is the plain ``requeue``."""
        plain: bool = getattr(self, "requeue")(job_id, now)  # noqa: B009 (a mixin of JobStore)
        return plain
