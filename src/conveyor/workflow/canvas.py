"""The canvas: signatures, ``chain``, ``group``, ``chord`` and how each one becomes graph nodes.

A canvas item describes work without storing it. ``build`` turns it into nodes and edges
(``workflow.build.Builder``): each item adds its nodes after the given parents and answers its
sinks (the nodes a successor waits for) and how a successor receives their results: after one
node, its result as first argument ("one"); after a group, the list of its members' results in
order ("all").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..broker.flow import POLICIES, PassMode, Policy
from ..errors import ValidationError

if TYPE_CHECKING:
    from ..task import Task
    from .build import Builder
    from .handle import WorkflowHandle

#: What ``build`` answers: the sinks and how a successor gets their results.
Built = tuple[list[str], PassMode]


class Canvas:
    """Something that can be part of a workflow and enqueued on its own."""

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """Add this item's nodes after ``after`` (see module doc)."""
        raise NotImplementedError

    def tasks(self) -> Iterable[Task]:
        """The tasks of every signature inside (to find the app)."""
        raise NotImplementedError

    def enqueue(self, *, name: str = "", policy: Policy = "fail") -> WorkflowHandle:
        """Store the whole graph atomically (all or nothing) and return its handle.

        ``policy`` applies to every edge: "fail" (default) ends the dependants of a failed node
        as cancelled with an ``upstream_failed`` error, "continue" runs them with None in the
        failed node's result slot, "ignore" runs them without that slot.
        """
        from .build import enqueue

        return enqueue(self, name=name, policy=policy)


@dataclass(frozen=True)
class Signature(Canvas):
    """One task call with its arguments and options (``task.s(*args, **kwargs)``)."""

    task: Task
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """One node."""
        return [b.add(self, after, passing)], "one"

    def tasks(self) -> Iterable[Task]:
        """This signature's task."""
        return (self.task,)


class Chain(Canvas):
    """Items run one after the other; each gets its predecessor's result first."""

    def __init__(self, *items: Canvas) -> None:
        self.items = [_canvas(i, "chain") for i in items]
        if not self.items:
            raise ValidationError("chain", "needs at least one item")

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """Each item after the previous one's sinks."""
        for item in self.items:
            after, passing = item.build(b, after, passing)
        return after, passing

    def tasks(self) -> Iterable[Task]:
        """Every task inside."""
        return [t for i in self.items for t in i.tasks()]


class Group(Canvas):
    """Items run in parallel; a successor gets the list of their results, in order."""

    def __init__(self, items: Iterable[Canvas]) -> None:
        self.items = [_canvas(i, "group") for i in items]
        if not self.items:
            raise ValidationError("group", "needs at least one item")

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """Every item after the same parents."""
        sinks: list[str] = []
        for item in self.items:
            sinks.extend(item.build(b, after, passing)[0])
        return sinks, "all"

    def tasks(self) -> Iterable[Task]:
        """Every task inside."""
        return [t for i in self.items for t in i.tasks()]


def chain(*items: Canvas) -> Chain:
    """``chain(a.s(x), b.s(), c.s())``: each result is the next job's first argument."""
    return Chain(*items)


def group(*items: Canvas | Iterable[Canvas]) -> Group:
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in ...)``: run in parallel."""
    if len(items) == 1 and not isinstance(items[0], Canvas):
        return Group(items[0])
    return Group(items)  # type: ignore[arg-type]


def chord(header: Canvas | Iterable[Canvas], body: Canvas) -> Chain:
    """``chord(group(...), callback.s())``: the callback gets the list of results, in order."""
    head = header if isinstance(header, Canvas) else Group(header)
    if isinstance(head, Signature):
        head = Group([head])
    return Chain(head, body)


def _canvas(item: object, where: str) -> Canvas:
    """Refuse what is not a canvas item (a plain task, a handle) with a clear error."""
    if not isinstance(item, Canvas):
        rule = "takes signatures (task.s(...)), chains, groups, chords or workflows"
        raise ValidationError(where, f"{rule}, got {type(item).__name__}")
    return item


def check_policy(policy: object) -> Policy:
    """``policy`` if it is one of "fail", "continue", "ignore", else ``ValidationError``."""
    if policy not in POLICIES:
        raise ValidationError("policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy  # type: ignore[return-value]
