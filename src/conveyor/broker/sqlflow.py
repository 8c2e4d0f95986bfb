"""Workflow storage of the SQL brokers (SQLite and PostgreSQL), plain SQL inside the job
transaction, written once for both (dialect seam: ``sqldb.Db``).

``wf_nodes`` holds one row per node (its workflow, the count of parents not finished yet, how
it receives results); ``wf_edges`` one row per edge with, once the parent finished, ``done``,
``ok`` and the parent's result (copied, so retention may drop the parent first). The broker
calls ``SqlFlow.done`` inside the transaction that finishes a job: ``flow.finished`` marks each
edge once (``UPDATE ... WHERE done = 0``: a second completion changes no row) and releases the
child when its counter reaches zero. On PostgreSQL the counter's ``UPDATE … RETURNING`` takes
the node's row lock, so two parents finishing at once in two transactions decrement in turn and
exactly one of them sees zero. Each backend keeps its own DDL (sqlite_flow.py, postgres/flow.py).
Also shared: a node's requeue that reads its parents' results again (``requeue_node``), the
retention sweep of finished workflows' graph records (``sweep_workflows``, from the reaper) and
storing a workflow or batch inside the caller's transaction (``enqueue_workflow_in_transaction``:
the broker's ``_txn_enqueue`` binds the caller's connection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from ..core.values import decode_value, encode_value
from . import flow
from .flow import FlowEdge, FlowNode, Input
from .sqldb import Db
from .sqlite_rows import Rec

#: job ids per ``done_many`` query (far below SQLite's bound-parameter limit)
_IN_CHUNK = 500
CANCELLABLE = (JobState.WAITING, JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
REVIVABLE = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)
#: Seconds between two sweeps for finished workflows' graphs (per broker object).
SWEEP_EVERY = 60.0
#: Workflows whose graph one sweep removes at most.
SWEEP_BATCH = 200
_GONE = (
    "SELECT workflow FROM {S}.wf_nodes n GROUP BY workflow HAVING SUM(CASE WHEN EXISTS"
    " (SELECT 1 FROM {S}.jobs j WHERE j.id = n.id) THEN 1 ELSE 0 END) = 0 LIMIT ?"
)
_PARENTS = (
    "SELECT e.parent, e.policy, e.ok, e.result, j.state FROM {S}.wf_edges e"
    " LEFT JOIN {S}.jobs j ON j.id = e.parent WHERE e.child = ? ORDER BY e.pos"
)


def store(db: Db, nodes: Sequence[FlowNode], edges: Sequence[FlowEdge]) -> None:
    """Insert a workflow's nodes and edges (the caller inserts the jobs in the same tx)."""
    db.many(
        "INSERT INTO {S}.wf_nodes (id, workflow, pending, passing, trig, pos)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(n.id, n.workflow, n.parents, n.passing, n.trigger, i) for i, n in enumerate(nodes)],
    )
    db.many(
        "INSERT INTO {S}.wf_edges (parent, child, pos, policy) VALUES (?, ?, ?, ?)",
        [(e.parent, e.child, i, e.policy) for i, e in enumerate(edges)],
    )


class SqlFlow:
    """``flow.FlowOps`` over one open transaction."""

    def __init__(self, db: Db, now: float) -> None:
        self._db, self._now = db, now

    def done(self, job: Job) -> None:
        """``job`` just reached a terminal state: release or end its dependants."""
        flow.done(self, job)

    def done_many(self, jobs: Sequence[Job]) -> None:
        """``done`` for jobs that each left a lease in this transaction (``complete``): one
        query per ``_IN_CHUNK`` jobs finds those with unmarked out-edges (usually none: plain
        jobs) and only those are walked, instead of one lookup per job. Exact: an edge leaving
        a job is marked only by that job's own ``done`` (a cascade only reaches waiting jobs,
        never a leased one)."""
        for start in range(0, len(jobs), _IN_CHUNK):
            chunk = jobs[start : start + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            sql = (
                f"SELECT DISTINCT parent FROM {{S}}.wf_edges WHERE done = 0 AND parent IN ({marks})"
            )
            parents = {row[0] for row in self._db.run(sql, [job.id for job in chunk]).fetchall()}
            for job in chunk:
                if job.id in parents:
                    self.done(job)

    def out_edges(self, parent: str) -> Sequence[tuple[str, str]]:
        """Edges leaving ``parent`` not marked yet (one indexed lookup; empty for plain jobs)."""
        # children in id order: a release locks them (``state``) in the order every other
        # multi-node lock takes (cancel_workflow), so the two never wait on each other in a cycle
        sql = "SELECT child, policy FROM {S}.wf_edges WHERE parent = ? AND done = 0 ORDER BY child"
        return [(c, p) for c, p in self._db.run(sql, (parent,)).fetchall()]

    def mark(self, parent: str, child: str, ok: bool, result: Any) -> bool:
        """Record the edge's outcome once (no row changes the second time)."""
        cur = self._db.run(
            "UPDATE {S}.wf_edges SET done = 1, ok = ?, result = ? WHERE parent = ? AND child = ?"
            " AND done = 0",
            (int(ok), _edge_json(result), parent, child),
        )
        return int(cur.rowcount) == 1

    def node(self, child: str) -> FlowNode | None:
        """The node's row."""
        sql = "SELECT id, workflow, pending, passing, trig FROM {S}.wf_nodes WHERE id = ?"
        row = self._db.run(sql, (child,)).fetchone()
        return None if row is None else FlowNode(*row)

    def state(self, child: str) -> JobState | None:
        """The child job's state column. On PostgreSQL the row is locked first (held to the
        end of the transaction): an operator's cancel of the child committing meanwhile is
        then seen here, before the node's counter is touched, instead of a stale ``waiting``
        that made the release fail with an illegal transition (and, locking the node's
        counter row before the job's, a lock order opposite to other paths)."""
        sql = "SELECT state FROM {S}.jobs WHERE id = ?"
        if self._db.locks_rows:
            sql += " FOR UPDATE"
        row = self._db.run(sql, (child,)).fetchone()
        return None if row is None else JobState(row[0])

    def decrement(self, child: str) -> int:
        """One parent fewer; how many remain."""
        sql = "UPDATE {S}.wf_nodes SET pending = pending - 1 WHERE id = ? RETURNING pending"
        return int(self._db.run(sql, (child,)).fetchone()[0])

    def inputs(self, child: str) -> list[Input]:
        """Parents' outcomes in edge order."""
        sql = "SELECT ok, result, policy FROM {S}.wf_edges WHERE child = ? ORDER BY pos"
        return [
            Input(bool(ok), _edge_value(result), policy)
            for ok, result, policy in self._db.run(sql, (child,)).fetchall()
        ]

    def pending(self, child: str) -> int:
        """Parents the node still waits for (0: released, or not a node)."""
        row = self._db.run("SELECT pending FROM {S}.wf_nodes WHERE id = ?", (child,)).fetchone()
        return 0 if row is None else int(row[0])

    def parents(self, child: str) -> list[flow.ParentView]:
        """The child's parents now (``flow.requeue_inputs``): a completed parent's current
        result, else its edge's, else its state."""
        out = []
        for parent, policy, ok, raw, state in self._db.run(_PARENTS, (child,)).fetchall():
            done, result = bool(ok), _edge_value(raw)
            if state == "completed":
                [rec] = self._db.rows("id = ?", (parent,), full=True)
                done, result = not lifecycle.result_dropped(rec.job), rec.job.result
            out.append(flow.ParentView(parent, policy, done, result, state))
        return out

    def requeue(self, rec: Rec) -> None:
        """``requeue_node`` inside the transaction: the node's row ``rec`` (locked) gets its
        parents' results read again, then pending with fresh attempts; its counter goes to 0
        (it has its inputs: a later requeue keeps them)."""
        child = rec.job.id
        sql = "SELECT trig, passing FROM {S}.wf_nodes WHERE id = ?"
        trig, passing = self._db.run(sql, (child,)).fetchone()
        inputs = flow.requeue_inputs(child, trig, passing, self.parents(child))
        lifecycle.requeue(rec.job, self._now)
        rec.job.args = [*inputs, *rec.job.args]
        if rec.data is not None:  # the stored envelope's parts stay encoded (typed JSON)
            rec.data["args"] = encode_value(rec.job.args, "args")
        self._db.save(rec)
        self._db.run("UPDATE {S}.wf_nodes SET pending = 0 WHERE id = ?", (child,))
        self._db.emit("requeued", rec.job, self._now)

    def release(self, child: str, inputs: list[Any]) -> None:
        """waiting -> pending (or scheduled, for the node's own delay), the inputs written into
        the envelope's arguments."""
        [rec] = self._db.rows("id = ?", (child,), full=True)
        lifecycle.release_parents(rec.job, self._now, inputs, flow.node_delay(rec.job))
        if rec.data is not None:  # the stored envelope's parts stay encoded (typed JSON)
            rec.data["args"] = encode_value(rec.job.args, "args")
        self._db.save(rec)
        self._db.emit("released", rec.job, self._now, note="parents finished")

    def upstream_failed(self, child: str, parent: str, detail: str) -> None:
        """waiting -> cancelled naming the failed parent."""
        [rec] = self._db.rows("id = ?", (child,), full=False)
        lifecycle.upstream_failed(rec.job, self._now, parent, detail)
        self._db.save(rec)
        self._db.emit("cancelled", rec.job, self._now, reason="upstream_failed", parent=parent)


class SqlWorkflows:
    """The ``WorkflowStore`` methods of the SQL brokers (mixed in; ``_db`` binds a tx)."""

    _write: Callable[[], AbstractContextManager[Any]]
    _db: Callable[[Any], Db]
    #: the broker's transactional enqueue: (connection, jobs, payloads, now, also(tx))
    _txn_enqueue: Callable[..., Any]
    requeue: Callable[[str, float], bool]

    #: ``enqueue_workflow_in_transaction`` works (``WorkflowStore``; ``app.batch(connection=)``)
    workflows_in_transaction = True
    _wf_sweep_at = float("-inf")

    def sweep_workflows(self, tx: Any, now: float) -> int:
        """Drop the graph records (nodes, edges, copied results) of workflows none of whose
        jobs is stored any more, inside the reaper's transaction ``tx``: job retention
        (completed / cancelled TTLs and caps, purges) decides when a finished workflow goes; a
        running one always has a stored job (an uncommitted one's rows are not seen at all).
        At most once per ``SWEEP_EVERY`` seconds: it reads every node row."""
        if now < self._wf_sweep_at + SWEEP_EVERY:
            return 0
        self._wf_sweep_at = now
        db = self._db(tx)
        gone = [row[0] for row in db.run(_GONE, (SWEEP_BATCH,)).fetchall()]
        for workflow in gone:
            db.run(
                "DELETE FROM {S}.wf_edges WHERE child IN"
                " (SELECT id FROM {S}.wf_nodes WHERE workflow = ?)",
                (workflow,),
            )
            db.run("DELETE FROM {S}.wf_nodes WHERE workflow = ?", (workflow,))
        return len(gone)

    def enqueue_workflow_in_transaction(
        self,
        connection: Any,
        jobs: Sequence[Job],
        payloads: Sequence[bytes],
        nodes: Sequence[FlowNode],
        edges: Sequence[FlowEdge],
        now: float,
    ) -> None:
        """Jobs, nodes and edges with the caller's connection, in its open transaction, under
        one savepoint (a refused store leaves the caller's work alone; docs/transactions.md)."""

        def graph(tx: Any) -> None:
            store(self._db(tx), nodes, edges)

        self._txn_enqueue(connection, jobs, payloads, now, graph)

    def requeue_node(self, job_id: str, now: float) -> bool:
        """Requeue; a node that never got its parents' results reads them now, in the same
        transaction (``WorkflowStore``; its row locked first on PostgreSQL)."""
        with self._write() as tx:
            db = self._db(tx)
            recs = db.rows("id = ?", (job_id,), full=True)
            ops = SqlFlow(db, now)
            if recs and recs[0].job.state in REVIVABLE and ops.pending(job_id) > 0:
                ops.requeue(recs[0])
                return True
        return self.requeue(job_id, now)  # not a node waiting for results: as usual

    def enqueue_workflow(
        self,
        jobs: Sequence[Job],
        payloads: Sequence[bytes],
        nodes: Sequence[FlowNode],
        edges: Sequence[FlowEdge],
        now: float,
    ) -> None:
        """Jobs, nodes and edges in one transaction."""
        with self._write() as tx:
            db = self._db(tx)
            db.insert(jobs, now, payloads)
            store(db, nodes, edges)

    def workflow_jobs(self, workflow_id: str) -> list[Job]:
        """The workflow's stored nodes, in enqueue order."""
        with self._write() as tx:
            db = self._db(tx)
            ids = [
                r[0]
                for r in db.run(
                    "SELECT id FROM {S}.wf_nodes WHERE workflow = ? ORDER BY pos", (workflow_id,)
                ).fetchall()
            ]
            where = "id IN (SELECT id FROM {S}.wf_nodes WHERE workflow = ?)"
            found = {r.job.id: r.job for r in db.rows(where, (workflow_id,), full=True)}
        return [found[i] for i in ids if i in found]

    def workflow_edges(self, workflow_id: str) -> list[FlowEdge]:
        """The edges into the workflow's nodes."""
        sql = (
            "SELECT e.parent, e.child, e.policy FROM {S}.wf_nodes n JOIN {S}.wf_edges e"
            " ON e.child = n.id WHERE n.workflow = ? ORDER BY n.pos, e.pos"
        )
        with self._write() as tx:
            rows = self._db(tx).run(sql, (workflow_id,)).fetchall()
        return [FlowEdge(p, c, pol) for p, c, pol in rows]

    def cancel_workflow(self, workflow_id: str, now: float) -> int:
        """Cancel the nodes that have not started, in one transaction."""
        with self._write() as tx:
            db = self._db(tx)
            where = (
                "id IN (SELECT id FROM {S}.wf_nodes WHERE workflow = ?) AND state IN"
                " ('waiting', 'pending', 'scheduled', 'retry_scheduled') ORDER BY id"
            )  # locked in id order (see ``out_edges``)
            recs = db.rows(where, (workflow_id,), full=False)
            ops = SqlFlow(db, now)
            for rec in recs:
                if ops.state(rec.job.id) not in CANCELLABLE:
                    continue  # ended by the cascade of an earlier one
                rec = db.rows("id = ?", (rec.job.id,), full=False)[0]
                lifecycle.cancel(rec.job, now)
                db.save(rec)
                db.emit("cancelled", rec.job, now)
                ops.done(rec.job)
            return len(recs)


def _edge_json(result: Any) -> bytes:
    """A parent's result as an edge keeps it: typed JSON, as a job's result is stored (a
    ``Decimal``, ``bytes`` or ``datetime`` reaches the child as it was returned)."""
    return orjson.dumps(encode_value(result, "result"))


def _edge_value(raw: Any) -> Any:
    """The result an edge holds (``_edge_json``; plain JSON written before is read alike)."""
    return None if raw is None else decode_value(orjson.loads(raw))
