"""Workflows: chains, groups, chords and explicit DAGs stored atomically (docs/workflows.md)."""

from .canvas import Canvas, Chain, Group, Signature, chain, chord, group
from .dag import NodeRef, Workflow
from .handle import WorkflowFailed, WorkflowHandle, WorkflowPending

__all__ = [
    "Canvas",
    "Chain",
    "Group",
    "NodeRef",
    "Signature",
    "Workflow",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowPending",
    "chain",
    "chord",
    "group",
]
