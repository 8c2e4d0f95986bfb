"""The facade's workflow builders: ``app.workflow`` (an explicit DAG) and ``app.batch``.

A mixin of ``Conveyor`` (``app.py``), split out to keep the facade under ~400 lines. Both
import their package lazily (``conveyor.workflow``), as the facade always did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runtime import Runtime
    from .task import JobSpec
    from .workflow import Workflow
    from .workflow.batch import Batch
    from .workflow.canvas import Signature, Spec


class WorkflowMixin:
    """Build workflows and batches bound to this app."""

    runtime: Runtime

    def workflow(self, name: str = "", *, policy: str = "fail") -> Workflow:
        """An explicit DAG: ``dag.add(task.s(...), after=[...])``, then ``dag.enqueue()``."""
        from .workflow import Workflow

        return Workflow(self, name, policy)  # type: ignore[arg-type]

    def batch(
        self,
        *,
        on_complete: Signature | Spec | JobSpec | None = None,
        on_success: Signature | Spec | JobSpec | None = None,
        on_failure: Signature | Spec | JobSpec | None = None,
        name: str = "",
        connection: Any = None,
    ) -> Batch:
        """``with app.batch(on_complete=notify.s()) as b:`` enqueue jobs; stored at the end of
        the block with the callbacks, atomically; ``b.status()`` counts (docs/workflows.md).
        ``connection``: store the batch inside that database transaction (SQLite: same file;
        PostgreSQL: a psycopg connection to the broker's database);
        ``async with`` stores without blocking the event loop."""
        from .workflow.batch import Batch

        return Batch(
            self.runtime,
            on_complete=on_complete,
            on_success=on_success,
            on_failure=on_failure,
            name=name,
            connection=connection,
        )
