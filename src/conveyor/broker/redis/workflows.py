"""Workflows on Redis: ``enqueue_workflow`` is one script (``wf_enqueue.lua``), the release of
dependants happens inside the finishing scripts (``wf_done`` in ``lua/_wf.lua``).

Nodes may sit in several queues, so the scripts write keys of several hash tags: workflows
need a standalone or Sentinel server (Redis Cluster refuses them with a clear error).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import orjson

from ...core.job import Job
from ...core.state import JobState
from ...errors import DuplicateJob, ValidationError
from .. import flow
from ..flow import FlowEdge, FlowNode, node_delay
from . import idguard
from .codec import fmt_time
from .codes import ScriptCode, options
from .plumbing import guarded

if TYPE_CHECKING:
    from .broker import RedisBroker

_REVIVABLE = ("dead_letter", "cancelled", "expired")
_NOT_STARTED = frozenset(
    {JobState.WAITING, JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED}
)


#: Seconds between two sweeps for finished workflows' graphs (per broker object).
SWEEP_EVERY = 60.0
#: Workflows one sweep checks at most.
SWEEP_BATCH = 200


class RedisWorkflows:
    """The ``WorkflowStore`` methods of ``RedisBroker`` (mixed in)."""

    _wf_sweep_at = float("-inf")

    @guarded
    def enqueue_workflow(
        self,
        jobs: Sequence[Job],
        payloads: Sequence[bytes],
        nodes: Sequence[FlowNode],
        edges: Sequence[FlowEdge],
        now: float,
    ) -> None:
        """All nodes, records and the index in one script call."""
        b = cast("RedisBroker", self)
        if b.cluster:
            raise ValidationError("workflow", "workflows need a standalone or Sentinel Redis")
        queue_of = {job.id: job.queue for job in jobs}
        ins: dict[str, list[list[str]]] = defaultdict(list)
        outs: dict[str, list[list[str]]] = defaultdict(list)
        for e in edges:
            ins[e.child].append([e.parent, e.policy])
            outs[e.parent].append([e.child, queue_of[e.child], e.policy])
        index = {
            "nodes": [[job.id, job.queue] for job in jobs],
            "edges": [[e.parent, e.child, e.policy] for e in edges],
        }
        custom = idguard.custom_ids(jobs)  # a node's own job_id: checked (wf_enqueue.lua)
        opts = options(
            now=fmt_time(now),
            events_max=str(b.retention.events_max),
            prefix=b.keys.prefix,
            index=orjson.dumps(index).decode(),
            check=orjson.dumps([[job.id, job.queue] for job in custom]).decode(),
        )
        args: list[Any] = [opts]
        for job, payload, node in zip(jobs, payloads, nodes, strict=True):
            b.qkeys(job.queue)  # validates the queue name
            args += (
                job.id,
                job.queue,
                payload,
                str(job.state),
                job.priority,
                fmt_time(job.run_at),
                fmt_time(job.created_at),
                job.task,
                node.workflow,
                node.parents,
                node.passing,
                node.trigger,
                orjson.dumps(ins[job.id]),
                orjson.dumps(outs[job.id]),
                *_flow_fields(job),
                _delay(job),
            )
        b.register({job.queue for job in jobs})
        workflow = nodes[0].workflow if nodes else ""
        # registered first: the sweep leaves entries younger than SWEEP_EVERY alone, so it
        # cannot drop this one before the script stored it
        b.client.zadd(b.keys.workflows(), {workflow: now})
        locks = idguard.reserve(b, custom) if custom else None  # ids unique across queues
        try:
            reply = b.runner.run("wf_enqueue", [b.keys.workflow(workflow)], args)
        finally:
            if locks:
                idguard.release(b, locks)
        if isinstance(reply, list) and reply[0] == ScriptCode.DUPLICATE_ID:
            raise DuplicateJob(reply[1].decode())
        for job in jobs:
            b.remember(job.id, job.queue)

    def _index(self, workflow_id: str) -> dict[str, Any]:
        b = cast("RedisBroker", self)
        raw = b.client.get(b.keys.workflow(workflow_id))
        return {"nodes": [], "edges": []} if raw is None else dict(orjson.loads(raw))

    @guarded
    def workflow_jobs(self, workflow_id: str) -> list[Job]:
        """The workflow's stored nodes, in enqueue order."""
        b = cast("RedisBroker", self)
        nodes = [(q, i) for i, q in b._index(workflow_id)["nodes"]]
        out = []
        for (queue, job_id), fields in zip(nodes, b.fetch_many(nodes), strict=True):
            if fields:
                out.append(b.decode_lenient(fields, queue, job_id))
        return out

    @guarded
    def workflow_edges(self, workflow_id: str) -> list[FlowEdge]:
        """The workflow's edges."""
        b = cast("RedisBroker", self)
        return [FlowEdge(p, c, pol) for p, c, pol in b._index(workflow_id)["edges"]]

    @guarded
    def requeue_node(self, job_id: str, now: float) -> bool:
        """Requeue; a node that never got its parents' results reads them now (``WorkflowStore``).

        Two steps: the parents' results are read here (``flow.requeue_inputs``, which names a
        parent without one), then ``wf_requeue.lua`` requeues the node with them only if it is
        still such a node (revivable, parents still counted): two callers cannot both give it
        inputs, and a parent finishing in between cannot release it (it is not waiting).
        """
        b = cast("RedisBroker", self)
        found = b.fetch(job_id)
        if found is None:
            return False
        queue, fields = found
        record = b.client.hgetall(b.keys.wf_node(queue, job_id))
        state = fields.get(b"state", b"").decode()
        if state not in _REVIVABLE or int(record.get(b"pending", 0)) <= 0:
            return b.requeue(job_id, now)  # not a node waiting for results: as usual
        parents = b._parents(record)
        trig, passing = record.get(b"trig", b"").decode(), record.get(b"passing", b"").decode()
        inputs = flow.requeue_inputs(job_id, trig, passing, parents)
        inject = ",".join(orjson.dumps(v).decode() for v in inputs)
        args = [job_id, fmt_time(now), b.retention.events_max, inject]
        keys = (*b.qkeys(queue), b.keys.wf_node(queue, job_id))
        if b.runner.run("wf_requeue", keys, args) != ScriptCode.OK:
            return b.requeue(job_id, now)  # it changed meanwhile: the plain rules decide
        b.wake_all()
        return True

    def _parents(self, record: dict[bytes, bytes]) -> list[flow.ParentView]:
        """The node's parents now: a completed parent's current result, else its edge's (the
        node field r:<parent>: "1" + result JSON, or "0"), else its state."""
        b = cast("RedisBroker", self)
        edges = orjson.loads(record.get(b"in", b"[]"))
        index = b._index(record.get(b"workflow", b"").decode())
        queue_of = {job_id: queue for job_id, queue in index["nodes"]}
        jobs = b.fetch_many([(queue_of.get(p, "default"), p) for p, _ in edges])  # one pipeline
        out = []
        for (parent, policy), fields in zip(edges, jobs, strict=True):
            mark = record.get(f"r:{parent}".encode(), b"0")
            done, result = mark[:1] == b"1", orjson.loads(mark[1:]) if mark[:1] == b"1" else None
            state = fields.get(b"state", b"").decode() or None
            if state == "completed":
                raw = fields.get(b"result")
                done, result = raw is not None or not _dropped(fields), orjson.loads(raw or b"null")
            out.append(flow.ParentView(parent, policy, done, result, state))
        return out

    def sweep_workflows(self, now: float) -> int:
        """Drop the graph records (index, node hashes with the copied results) of workflows
        none of whose jobs is stored any more: job retention (completed / cancelled TTLs and
        caps, purges) decides when a finished workflow goes; a running one always has a
        stored job and is only moved to the back of the line. At most once per
        ``SWEEP_EVERY`` seconds and ``SWEEP_BATCH`` workflows (the least recently checked)."""
        b = cast("RedisBroker", self)
        if now < b._wf_sweep_at + SWEEP_EVERY:
            return 0
        b._wf_sweep_at = now
        registry = b.keys.workflows()
        due = b.client.zrangebyscore(registry, "-inf", now - SWEEP_EVERY, 0, SWEEP_BATCH)
        gone = 0
        for raw in due:
            workflow = raw.decode()
            nodes = [(queue, job_id) for job_id, queue in b._index(workflow)["nodes"]]
            if b._any_stored(nodes):
                b.client.zadd(registry, {workflow: now})
                continue
            keys = [b.keys.workflow(workflow), *(b.keys.wf_node(q, i) for q, i in nodes)]
            for start in range(0, len(keys), 500):
                b.client.delete(*keys[start : start + 500])
            b.client.zrem(registry, workflow)
            gone += 1
        return gone

    def _any_stored(self, nodes: list[tuple[str, str]]) -> bool:
        """Does any of these (queue, id) jobs still exist? (chunks; stops at a live one)"""
        b = cast("RedisBroker", self)
        for start in range(0, len(nodes), 200):
            chunk = nodes[start : start + 200]
            if b.client.exists(*(b.keys.job(q, i) for q, i in chunk)):
                return True
        return False

    def cancel_workflow(self, workflow_id: str, now: float) -> int:
        """Cancel the nodes that have not started, one atomic cancel each (a cancelled node's
        dependants end in the same step, so later ones answer False)."""
        b = cast("RedisBroker", self)
        doomed = [j.id for j in b.workflow_jobs(workflow_id) if j.state in _NOT_STARTED]
        for job_id in doomed:
            b.cancel(job_id, now)
        return len(doomed)


def _delay(job: Job) -> str:
    """The node's own delay ("" = none), counted from its release (``flow.node_delay``)."""
    delay = node_delay(job)
    return fmt_time(delay) if delay > 0 else ""


def _flow_fields(job: Job) -> tuple[str, str, str]:
    """expires_at, flow group and flow record JSON of a node ("" = none; issue 15), as
    enqueue.lua takes them: a node of a flow-controlled task waits in its group too."""
    expires = "" if job.expires_at is None else fmt_time(job.expires_at)
    if job.flow is None:
        return expires, "", ""
    return expires, str(job.flow["g"]), orjson.dumps(job.flow).decode()


def _dropped(fields: dict[bytes, bytes]) -> bool:
    """A completed job's hash says it completed without its result (``lifecycle.result_dropped``:
    its last ``errors`` line is of kind ``result_error``)."""
    lines = fields.get(b"errors", b"").splitlines()
    try:
        last = orjson.loads(lines[-1]) if lines else None
    except orjson.JSONDecodeError:
        return False
    return isinstance(last, dict) and last.get("kind") == "result_error"
