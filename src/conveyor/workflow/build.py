"""From a canvas to stored jobs: ``Builder`` collects nodes and edges, ``enqueue`` stores them.

Every node is built like any job (``Producer.build_job``: the task's defaults and the
signature's options), marked with its workflow in ``metadata["workflow"]`` and, if it has
parents, put in the ``waiting`` state. The broker stores the jobs, nodes and edges in one
atomic step (``Broker.enqueue_workflow``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..broker.flow import FlowEdge, FlowNode, PassMode, Policy, Trigger
from ..core.ids import new_ulid
from ..core.job import Job
from ..core.serialization import encode_envelope
from ..core.state import JobState
from ..errors import ValidationError
from ..handles import JobHandle
from ..middleware import after_enqueue_batch
from ..task import JobSpec
from .canvas import Canvas, Signature, check_policy
from .handle import WorkflowHandle
from .host import FlowHost

#: The ``metadata`` key a workflow node carries: ``{"id": <workflow id>, "name": <name>}``.
META_KEY = "workflow"


class Builder:
    """Collects the nodes and edges of one workflow."""

    def __init__(self, runtime: FlowHost, workflow_id: str, name: str, policy: Policy) -> None:
        self.runtime = runtime
        self.workflow_id = workflow_id
        self.name = name
        self.policy = policy
        self.now = runtime.now()
        self.jobs: list[Job] = []
        self.nodes: list[FlowNode] = []
        self.edges: list[FlowEdge] = []

    @contextlib.contextmanager
    def edge_policy(self, policy: Policy) -> Iterator[None]:
        """Use ``policy`` for the edges added inside the block."""
        saved, self.policy = self.policy, policy
        try:
            yield
        finally:
            self.policy = saved

    def add(
        self, sig: Signature, after: list[str], passing: PassMode, trigger: Trigger = "all_done"
    ) -> str:
        """One node running ``sig`` after ``after``; returns its job id."""
        spec = JobSpec(sig.task.name, tuple(sig.args), dict(sig.kwargs), dict(sig.options))
        given = (None,) if passing != "none" else ()  # the parents' result comes first
        sig.task.binder.require((*given, *sig.args), sig.kwargs)
        return self.add_spec(spec, after, passing, trigger)

    def add_spec(
        self, spec: JobSpec, after: list[str], passing: PassMode, trigger: Trigger = "all_done"
    ) -> str:
        """One node from a ``JobSpec``."""
        if spec.options.get("idempotency_key") is not None:
            raise ValidationError("idempotency_key", "workflow nodes cannot have one")
        job = self.runtime.producer.build_job(spec, self.now)
        if job.idempotency_key is not None:  # unique= / debounce= dedup on one: a deduplicated
            # node is never stored and its dependants would wait for ever
            field = "debounce" if spec.options.get("debounce") is not None else "unique"
            raise ValidationError(field, "workflow nodes cannot deduplicate (an idempotency key)")
        meta: dict[str, Any] = {"id": self.workflow_id, "name": self.name}
        if after:
            job.state = JobState.WAITING
            if spec.options.get("delay"):  # counted from the release (lifecycle.release_parents)
                meta["delay"] = float(spec.options["delay"])
        job.metadata = {**job.metadata, META_KEY: meta}
        self.jobs.append(job)
        self.nodes.append(FlowNode(job.id, self.workflow_id, len(after), passing, trigger))
        self.edges.extend(FlowEdge(p, job.id, self.policy) for p in after)
        return str(job.id)

    def store(self, sinks: list[str], connection: Any = None) -> WorkflowHandle:
        """Run the enqueue middleware, encode, store atomically (inside the caller's
        transaction with ``connection``); the handle."""
        rt = self.runtime
        before, after = rt.producer.hooks()
        handles = [JobHandle.bind(job, rt) for job in self.jobs]
        for handle in handles:
            for mw in before:
                mw.before_enqueue(rt.owner, handle)
        limit = rt.settings.max_payload_bytes
        payloads = [encode_envelope(h, limit) for h in handles]
        if connection is None:
            rt.broker.enqueue_workflow(handles, payloads, self.nodes, self.edges, self.now)
        else:
            from ..txn import raw_connection

            raw = raw_connection(connection)
            rt.broker.enqueue_workflow_in_transaction(
                raw, handles, payloads, self.nodes, self.edges, self.now
            )
        if after:
            after_enqueue_batch(after, rt.owner, handles, [False] * len(handles))
        queues = {h.id: h.queue for h in handles if h.id in set(sinks)}
        return WorkflowHandle(rt, self.workflow_id, [h.id for h in handles], sinks, queues)


def runtime_of(item: Canvas, app: Any = None) -> FlowHost:
    """The runtime that stores ``item``: the given app's, else its first task's app's."""
    if app is None:
        first = next(iter(item.tasks()), None)
        app = None if first is None else first.app
    rt = getattr(app, "runtime", app)
    if rt is None or not hasattr(rt, "producer") or not hasattr(rt, "broker"):
        raise ValidationError(
            "workflow", "cannot tell which app stores it: pass enqueue(app=...) or use app.workflow"
        )
    host: FlowHost = rt
    return host


def enqueue(item: Canvas, *, name: str, policy: Policy, app: Any = None) -> WorkflowHandle:
    """Build ``item`` into one workflow and store it (see ``Canvas.enqueue``)."""
    rt = runtime_of(item, app)
    if not isinstance(name, str) or len(name) > 200:
        raise ValidationError("name", "must be a string of at most 200 characters")
    b = Builder(rt, new_ulid(rt.now(), rt.id_rng), name, check_policy(policy))
    sinks, _ = item.build(b, [], "none")
    return b.store(sinks)
