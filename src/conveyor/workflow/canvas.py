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
from ..task import JobSpec

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

    def tasks(self) -> Iterable[Task[..., Any]]:
        """The tasks of every signature inside (to find the app)."""
        raise NotImplementedError

    def enqueue(
        self, *, name: str = "", policy: Policy = "fail", app: Any = None
    ) -> WorkflowHandle:
        """Store the whole graph atomically (all or nothing) and return its handle.

        ``policy`` applies to every edge: "fail" (default) ends the dependants of a failed node
        as cancelled with an ``upstream_failed`` error, "continue" runs them with None in the
        failed node's result slot, "ignore" runs them without that slot.
        """
        from .build import enqueue

        return enqueue(self, name=name, policy=policy, app=app)


@dataclass(frozen=True)
class Spec(Canvas):
    """A ``JobSpec`` as a step (``task.s(...)``, ``task.si(...)``, or written by hand).

    After another step it gets the upstream result as first argument when its function can
    take it there (``steps.spec_mode``); ``immutable`` (``task.si``) never gets it."""

    spec: JobSpec
    immutable: bool = False

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """One node; whether it receives its parents' results is decided here."""
        from .steps import spec_mode

        upstream = bool(after) and passing != "none" and not self.immutable
        mode = spec_mode(b.runtime, self.spec, passing if upstream else "none")
        return [b.add_spec(self.spec, after, mode)], "one"

    def tasks(self) -> Iterable[Task[..., Any]]:
        """The task that built the spec (none for a hand-written one: the app then comes from
        another item or ``enqueue(app=...)``)."""
        origin = self.spec.origin
        return () if origin is None else (origin,)


@dataclass(frozen=True)
class Signature(Canvas):
    """One task call whose first argument comes from its parents (``task.partial(...)``, the
    explicit form of ``task.s(...)`` after another step); without parents it runs with just
    its own arguments."""

    task: Task[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """One node."""
        return [b.add(self, after, passing)], "one"

    def tasks(self) -> Iterable[Task[..., Any]]:
        """This signature's task."""
        return (self.task,)


class Chain(Canvas):
    """Items run one after the other; each gets its predecessor's result first."""

    def __init__(self, *items: Canvas | JobSpec) -> None:
        self.items = [_canvas(i, "chain") for i in items]
        if not self.items:
            raise ValidationError("chain", "needs at least one item")

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """Each item after the previous one's sinks."""
        for item in self.items:
            after, passing = item.build(b, after, passing)
        return after, passing

    def tasks(self) -> Iterable[Task[..., Any]]:
        """Every task inside."""
        return [t for i in self.items for t in i.tasks()]


class Group(Canvas):
    """Items run in parallel; a successor gets the list of their results, in order."""

    def __init__(self, items: Iterable[Canvas | JobSpec]) -> None:
        self.items = [_canvas(i, "group") for i in items]
        if not self.items:
            raise ValidationError("group", "needs at least one item")

    def build(self, b: Builder, after: list[str], passing: PassMode) -> Built:
        """Every item after the same parents."""
        sinks: list[str] = []
        for item in self.items:
            sinks.extend(item.build(b, after, passing)[0])
        return sinks, "all"

    def tasks(self) -> Iterable[Task[..., Any]]:
        """Every task inside."""
        return [t for i in self.items for t in i.tasks()]


def chain(*items: Canvas | JobSpec) -> Chain:
    """``chain(fetch.s(url), parse.s(), store.s())``: each result is the next one's first
    argument (``task.si(...)``: a step that gets no result)."""
    return Chain(*items)


def group(*items: Canvas | JobSpec | Iterable[Canvas | JobSpec]) -> Group:
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in ...)``: run in parallel."""
    if len(items) == 1 and not isinstance(items[0], Canvas | JobSpec):
        return Group(items[0])
    return Group(items)  # type: ignore[arg-type]


def chord(header: Canvas | JobSpec | Iterable[Canvas | JobSpec], body: Canvas | JobSpec) -> Chain:
    """``chord(group(...), summarize.s())``: the callback gets the list of results first."""
    head = _canvas(header, "chord") if isinstance(header, Canvas | JobSpec) else Group(header)
    if isinstance(head, Signature | Spec):
        head = Group([head])
    return Chain(head, _canvas(body, "chord"))


def _canvas(item: object, where: str) -> Canvas:
    """Refuse what is not a canvas item (a plain task, a handle) with a clear error."""
    if isinstance(item, JobSpec):
        return Spec(item)
    if not isinstance(item, Canvas):
        rule = "takes task.s(...), .si(...), .partial(...), chains, groups, chords or workflows"
        raise ValidationError(where, f"{rule}, got {type(item).__name__}")
    return item


def check_policy(policy: object) -> Policy:
    """``policy`` if it is one of "fail", "continue", "ignore", else ``ValidationError``."""
    if policy not in POLICIES:
        raise ValidationError("policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy  # type: ignore[return-value]
