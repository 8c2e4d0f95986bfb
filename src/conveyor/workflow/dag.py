"""Explicit DAGs: ``app.workflow(name=...)``, ``dag.add(item, after=[...])``, ``dag.enqueue()``.

A ``Workflow`` records its additions and replays them into a ``Builder`` when built, so it is
also a canvas item: a DAG can sit inside a chain, a group or another DAG (nested workflows).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..broker.flow import PassMode, Policy
from ..errors import ValidationError
from ..task import JobSpec
from .canvas import Built, Canvas, _canvas, check_policy

if TYPE_CHECKING:
    from ..task import Task
    from .build import Builder
    from .handle import WorkflowHandle


@dataclass(frozen=True)
class NodeRef:
    """What ``dag.add`` returns: pass it in ``after=`` of later additions."""

    dag: Workflow
    index: int


@dataclass(frozen=True)
class _Step:
    item: Canvas
    after: tuple[int, ...]
    policy: Policy | None
    results: bool


class Workflow(Canvas):
    """An explicit DAG of canvas items (see module doc)."""

    def __init__(self, app: Any = None, name: str = "", policy: Policy = "fail") -> None:
        self.app = app
        self.name = name
        self.policy = check_policy(policy)
        self._steps: list[_Step] = []

    def add(
        self,
        item: Canvas | JobSpec,
        *,
        after: Sequence[NodeRef] = (),
        policy: Policy | None = None,
        results: bool = True,
    ) -> NodeRef:
        """Add ``item`` to run once every node in ``after`` finished.

        With one parent the item gets its result as first argument, with several the list of
        their results (in ``after`` order); ``results=False`` passes nothing. ``policy``
        overrides the workflow's for these edges.
        """
        item = _canvas(item, "workflow.add")
        after = tuple(after)
        for ref in after:
            if not isinstance(ref, NodeRef) or ref.dag is not self:
                raise ValidationError("after", "takes what this workflow's add() returned")
        if len({ref.index for ref in after}) != len(after):  # one edge per parent: the node
            raise ValidationError("after", "lists a node twice")  # would wait for ever
        if policy is not None:
            check_policy(policy)
        self._steps.append(_Step(item, tuple(r.index for r in after), policy, results))
        return NodeRef(self, len(self._steps) - 1)

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """Replay the additions; sources go after ``after``; sinks are the unused steps."""
        built: list[Built] = []
        used: set[int] = set()
        for step in self._steps:
            used.update(step.after)
            if not step.after:
                built.append(step.item.build(b, after, passing))
                continue
            parents = [n for i in step.after for n in built[i][0]]
            single = len(step.after) == 1 and built[step.after[0]][1] == "one"
            mode: PassMode = "none" if not step.results else "one" if single else "all"
            with b.edge_policy(step.policy or self.policy):
                built.append(step.item.build(b, parents, mode))
        if not built:
            raise ValidationError("workflow", "has no nodes (call add() first)")
        sinks = [n for i, (nodes, _) in enumerate(built) if i not in used for n in nodes]
        return sinks, "one" if len(sinks) == 1 else "all"

    def tasks(self) -> Iterable[Task[..., Any]]:
        """Every task inside."""
        return [t for s in self._steps for t in s.item.tasks()]

    def enqueue(
        self, *, name: str = "", policy: Policy | None = None, app: Any = None
    ) -> WorkflowHandle:
        """Store the DAG atomically and return its handle."""
        from .build import enqueue

        chosen = policy or self.policy
        return enqueue(self, name=name or self.name, policy=chosen, app=app or self.app)
