"""The workflow engine's one algorithm: what finishing a node does to its dependants.

Every backend stores a workflow the same way (docs/workflows.md): each node is a job (the ones
with parents start ``waiting``), each edge ``parent -> child`` carries a failure policy and,
once the parent finished, whether it succeeded and its result; each node keeps a counter of
parents not finished yet. ``finished`` runs INSIDE the atomic step that finishes a job (the
memory broker's lock, the SQLite transaction; the Redis Lua script ``wf_release`` in
``_wf.lua`` mirrors it line for line), so a dependant is released exactly when its last parent
finishes and never by a polling task.

Exactly once: an edge is marked done once (``FlowOps.mark`` answers False the second time), and
only a marked edge decrements its child's counter; a completion with a stale fencing token
never reaches here (the backend refused it before), so a retried or duplicated completion
cannot release a child twice, and a chord callback fires once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..core.job import Job
from ..core.lifecycle import result_dropped
from ..core.state import JobState

Policy = Literal["fail", "continue", "ignore"]
PassMode = Literal["none", "one", "all"]
Trigger = Literal["all_done", "one_failed"]
POLICIES: tuple[str, ...] = ("fail", "continue", "ignore")


@dataclass(frozen=True)
class FlowEdge:
    """``parent`` must finish before ``child`` runs; ``policy`` says what a failure of
    ``parent`` does to ``child``: "fail" ends it (``upstream_failed``), "continue" runs it
    with None in the failed parent's place, "ignore" runs it without that parent's slot."""

    parent: str
    child: str
    policy: Policy = "fail"


@dataclass(frozen=True)
class FlowNode:
    """A node's place in its workflow: ``passing`` says how its parents' results reach it
    ("one": the single parent's result as first argument; "all": the list of results, in edge
    order, as first argument; "none": nothing). ``trigger`` "one_failed" runs the node only if a
    parent failed (a batch's ``on_failure``), else it ends cancelled."""

    id: str
    workflow: str
    parents: int
    passing: PassMode = "none"
    trigger: Trigger = "all_done"


@dataclass(frozen=True)
class Input:
    """One parent's outcome as its child sees it."""

    ok: bool
    result: Any
    policy: str


class FlowOps(Protocol):
    """What ``finished`` needs of a backend, called inside its atomic step."""

    def out_edges(self, parent: str) -> Sequence[tuple[str, str]]:
        """(child, policy) of every edge leaving ``parent`` (empty for most jobs: keep cheap)."""
        ...

    def mark(self, parent: str, child: str, ok: bool, result: Any) -> bool:
        """Record the edge's outcome; False if it was already recorded (nothing changes)."""
        ...

    def node(self, child: str) -> FlowNode | None:
        """The node's record (None: the node's job was purged)."""
        ...

    def state(self, child: str) -> JobState | None:
        """The child's job state."""
        ...

    def decrement(self, child: str) -> int:
        """One parent fewer to wait for; returns how many remain."""
        ...

    def inputs(self, child: str) -> list[Input]:
        """Every parent's outcome, in edge order."""
        ...

    def release(self, child: str, inputs: list[Any]) -> None:
        """waiting -> pending, ``inputs`` before its arguments (``lifecycle.release_parents``)."""
        ...

    def upstream_failed(self, child: str, parent: str, detail: str) -> None:
        """waiting -> cancelled naming ``parent`` (``lifecycle.upstream_failed``)."""
        ...


#: how a dependant's error names a parent completed without its result
#: (``lifecycle.result_dropped``)
DROPPED = "completed without its result (result_error)"


def done(ops: FlowOps, job: Job) -> None:
    """``finished`` for ``job``, which just reached a terminal state (every backend's entry)."""
    ok = job.state is JobState.COMPLETED
    finished(ops, job.id, ok, job.result if ok else None, dropped=ok and result_dropped(job))


def finished(ops: FlowOps, job_id: str, ok: bool, result: Any, dropped: bool = False) -> None:
    """Job ``job_id`` reached a terminal state (``ok``: completed): release or end its dependants.

    A dependant ended by a failure ends in turn, so a failure cascades down the graph (with a
    stack, not recursion: a long chain cannot overflow). ``dropped``: it completed without its
    result; a dependant that takes results sees it as failed (its policy decides), never None
    in its place, while one that takes none runs as after any completion.
    """
    stack = [(job_id, ok, result, dropped)]
    while stack:
        parent, ok, result, dropped = stack.pop()
        for child, policy in ops.out_edges(parent):
            node = ops.node(child) if dropped else None
            edge_ok = ok and (node is None or node.passing == "none")
            if not ops.mark(parent, child, edge_ok, result if edge_ok else None):
                continue
            node = node or ops.node(child)
            if node is None or ops.state(child) is not JobState.WAITING:
                continue
            if not edge_ok and policy == "fail" and node.trigger != "one_failed":
                ops.upstream_failed(child, parent, DROPPED if ok else "failed")
                stack.append((child, False, None, False))
                continue
            if ops.decrement(child) > 0:
                continue
            inputs = ops.inputs(child)
            if node.trigger == "one_failed" and all(i.ok for i in inputs):
                ops.upstream_failed(child, parent, "and every other parent succeeded")
                stack.append((child, False, None, False))
                continue
            ops.release(child, passed(node.passing, inputs))


@dataclass(frozen=True)
class ParentView:
    """A parent as a requeued child sees it: ``result`` when it completed (now, or when its
    edge was marked), ``state`` else (None: gone)."""

    id: str
    policy: str
    completed: bool
    result: Any
    state: str | None


def requeue_inputs(child: str, trigger: str, passing: str, parents: list[ParentView]) -> list[Any]:
    """The arguments a node that never got its parents' results (it ended ``upstream_failed``
    or was cancelled while waiting) gets when an operator requeues it: its parents' results,
    read again now. A parent without one, whose edge would not let the child run without it
    (policy "fail"), or that has not finished, is named in a ``ValidationError``."""
    from ..errors import ValidationError

    inputs = []
    for p in parents:
        if p.completed:
            inputs.append(Input(True, p.result, p.policy))
            continue
        finished = p.state in _ENDED
        if finished and (p.policy != "fail" or trigger == "one_failed"):
            inputs.append(Input(False, None, p.policy))
            continue
        why = "has not finished" if p.state is not None and not finished else "has no result"
        raise ValidationError(
            "job_id",
            f"job {child} cannot run without its parents' results: parent {p.id}"
            f" ({p.state or 'deleted'}) {why}; requeue {p.id} first, and {child} once it"
            " completed",
        )
    return passed(passing, inputs)


_ENDED = ("completed", "dead_letter", "cancelled", "expired")


def node_delay(job: Any) -> float:
    """A node's own delay, counted from its release (``metadata["workflow"]["delay"]``)."""
    meta = job.metadata.get("workflow") if isinstance(job.metadata, dict) else None
    return float(meta.get("delay") or 0.0) if isinstance(meta, dict) else 0.0


def passed(passing: str, inputs: list[Input]) -> list[Any]:
    """The arguments a released node gets before its own (see ``FlowNode``)."""
    if passing == "one":
        return [inputs[0].result if inputs else None]
    if passing == "all":
        return [[i.result for i in inputs if i.ok or i.policy != "ignore"]]
    return []
