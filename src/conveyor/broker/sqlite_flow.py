"""Workflow storage of the SQLite backend: two tables, plain SQL, inside the job transaction.

``wf_nodes`` holds one row per node (its workflow, the count of parents not finished yet, how
it receives results); ``wf_edges`` one row per edge with, once the parent finished, ``done``,
``ok`` and the parent's result (copied, so retention may drop the parent first). The broker
calls ``SqliteFlow.done`` inside the transaction that finishes a job: ``flow.finished`` marks
each edge once (``UPDATE ... WHERE done = 0``: a second completion changes no row) and releases
the child when its counter reaches zero. Plain SQL on purpose: the PostgreSQL backend ports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import orjson

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from . import flow
from .flow import FlowEdge, FlowNode, Input

if TYPE_CHECKING:
    from .sqlite import SqliteBroker
    from .sqlite_store import Tx

#: Tables of schema version 4 (also the 3 -> 4 migration).
SCHEMA = """
CREATE TABLE IF NOT EXISTS wf_nodes (id TEXT PRIMARY KEY, workflow TEXT NOT NULL,
  pending INTEGER NOT NULL, passing TEXT NOT NULL, trig TEXT NOT NULL, pos INTEGER NOT NULL)
  WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS wf_nodes_workflow ON wf_nodes (workflow, pos);
CREATE TABLE IF NOT EXISTS wf_edges (parent TEXT NOT NULL, child TEXT NOT NULL,
  pos INTEGER NOT NULL, policy TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0, ok INTEGER,
  result BLOB, PRIMARY KEY (parent, child)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS wf_edges_child ON wf_edges (child, pos)"""


def store(tx: Tx, nodes: Sequence[FlowNode], edges: Sequence[FlowEdge]) -> None:
    """Insert a workflow's nodes and edges (the caller inserts the jobs in the same tx)."""
    tx.conn.executemany(
        "INSERT INTO wf_nodes (id, workflow, pending, passing, trig, pos) VALUES (?,?,?,?,?,?)",
        [(n.id, n.workflow, n.parents, n.passing, n.trigger, i) for i, n in enumerate(nodes)],
    )
    tx.conn.executemany(
        "INSERT INTO wf_edges (parent, child, pos, policy) VALUES (?, ?, ?, ?)",
        [(e.parent, e.child, i, e.policy) for i, e in enumerate(edges)],
    )


def member_ids(tx: Tx, workflow_id: str) -> list[str]:
    """The workflow's node ids in enqueue order."""
    sql = "SELECT id FROM wf_nodes WHERE workflow = ? ORDER BY pos"
    return [r[0] for r in tx.conn.execute(sql, (workflow_id,))]


def edges_of(tx: Tx, workflow_id: str) -> list[FlowEdge]:
    """The edges into the workflow's nodes."""
    sql = (
        "SELECT e.parent, e.child, e.policy FROM wf_nodes n JOIN wf_edges e ON e.child = n.id"
        " WHERE n.workflow = ? ORDER BY n.pos, e.pos"
    )
    return [FlowEdge(p, c, pol) for p, c, pol in tx.conn.execute(sql, (workflow_id,))]


class SqliteFlow:
    """``flow.FlowOps`` over one open transaction."""

    def __init__(self, broker: SqliteBroker, tx: Tx, now: float) -> None:
        self._broker, self._tx, self._now = broker, tx, now
        self._c = tx.conn

    def done(self, job: Job) -> None:
        """``job`` just reached a terminal state: release or end its dependants."""
        ok = job.state is JobState.COMPLETED
        flow.finished(self, job.id, ok, job.result if ok else None)

    def out_edges(self, parent: str) -> Sequence[tuple[str, str]]:
        """Edges leaving ``parent`` not marked yet (one indexed lookup; empty for plain jobs)."""
        sql = "SELECT child, policy FROM wf_edges WHERE parent = ? AND done = 0"
        return self._c.execute(sql, (parent,)).fetchall()

    def mark(self, parent: str, child: str, ok: bool, result: Any) -> bool:
        """Record the edge's outcome once (no row changes the second time)."""
        cur = self._c.execute(
            "UPDATE wf_edges SET done = 1, ok = ?, result = ? WHERE parent = ? AND child = ?"
            " AND done = 0",
            (int(ok), orjson.dumps(result), parent, child),
        )
        return cur.rowcount == 1

    def node(self, child: str) -> FlowNode | None:
        """The node's row."""
        sql = "SELECT id, workflow, pending, passing, trig FROM wf_nodes WHERE id = ?"
        row = self._c.execute(sql, (child,)).fetchone()
        return None if row is None else FlowNode(*row)

    def state(self, child: str) -> JobState | None:
        """The child job's state column."""
        row = self._c.execute("SELECT state FROM jobs WHERE id = ?", (child,)).fetchone()
        return None if row is None else JobState(row[0])

    def decrement(self, child: str) -> int:
        """One parent fewer; how many remain."""
        sql = "UPDATE wf_nodes SET pending = pending - 1 WHERE id = ? RETURNING pending"
        return int(self._c.execute(sql, (child,)).fetchone()[0])

    def inputs(self, child: str) -> list[Input]:
        """Parents' outcomes in edge order."""
        sql = "SELECT ok, result, policy FROM wf_edges WHERE child = ? ORDER BY pos"
        return [
            Input(bool(ok), None if result is None else orjson.loads(result), policy)
            for ok, result, policy in self._c.execute(sql, (child,))
        ]

    def pending(self, child: str) -> int:
        """Parents the node still waits for (0: released, or not a node)."""
        row = self._c.execute("SELECT pending FROM wf_nodes WHERE id = ?", (child,)).fetchone()
        return 0 if row is None else int(row[0])

    def parents(self, child: str) -> list[flow.ParentView]:
        """The child's parents now (``flow.requeue_inputs``): a completed parent's current
        result, else its edge's, else its state."""
        sql = (
            "SELECT e.parent, e.policy, e.ok, e.result, j.state FROM wf_edges e"
            " LEFT JOIN jobs j ON j.id = e.parent WHERE e.child = ? ORDER BY e.pos"
        )
        out = []
        for parent, policy, ok, raw, state in self._c.execute(sql, (child,)).fetchall():
            done, result = bool(ok), None if raw is None else orjson.loads(raw)
            if state == "completed":
                [rec] = self._broker._rows(self._tx, "id = ?", (parent,), full=True)
                done, result = True, rec.job.result
            out.append(flow.ParentView(parent, policy, done, result, state))
        return out

    def requeue(self, child: str) -> bool:
        """``requeue_node`` inside the transaction (see ``SqliteWorkflows.requeue_node``)."""
        [rec] = self._broker._rows(self._tx, "id = ?", (child,), full=True)
        trig, passing = self._c.execute(
            "SELECT trig, passing FROM wf_nodes WHERE id = ?", (child,)
        ).fetchone()
        inputs = flow.requeue_inputs(child, trig, passing, self.parents(child))
        lifecycle.requeue(rec.job, self._now)
        rec.job.args = [*inputs, *rec.job.args]
        if rec.data is not None:
            rec.data["args"] = rec.job.args
        self._broker._save(self._tx, rec)
        self._c.execute("UPDATE wf_nodes SET pending = 0 WHERE id = ?", (child,))
        self._tx.emit("requeued", rec.job, self._now)
        return True

    def release(self, child: str, inputs: list[Any]) -> None:
        """waiting -> pending, the inputs written into the envelope's arguments."""
        [rec] = self._broker._rows(self._tx, "id = ?", (child,), full=True)
        lifecycle.release_parents(rec.job, self._now, inputs, flow.node_delay(rec.job))
        if rec.data is not None:
            rec.data["args"] = rec.job.args
        self._broker._save(self._tx, rec)
        self._tx.emit("released", rec.job, self._now, note="parents finished")

    def upstream_failed(self, child: str, parent: str, detail: str) -> None:
        """waiting -> cancelled naming the failed parent."""
        [rec] = self._broker._rows(self._tx, "id = ?", (child,))
        lifecycle.upstream_failed(rec.job, self._now, parent, detail)
        self._broker._save(self._tx, rec)
        self._tx.emit("cancelled", rec.job, self._now, reason="upstream_failed", parent=parent)


#: Seconds between two sweeps for finished workflows' graphs (per broker object).
SWEEP_EVERY = 60.0
#: Workflows whose graph one sweep removes at most.
SWEEP_BATCH = 200
_GONE = (
    "SELECT workflow FROM wf_nodes n GROUP BY workflow"
    " HAVING MAX(EXISTS (SELECT 1 FROM jobs j WHERE j.id = n.id)) = 0 LIMIT ?"
)


class SqliteWorkflows:
    """The ``WorkflowStore`` methods of ``SqliteBroker`` (mixed in)."""

    workflows_in_transaction = True
    _wf_sweep_at = float("-inf")

    def sweep_workflows(self, tx: Tx, now: float) -> int:
        """Drop the graph records (nodes, edges, copied results) of workflows none of whose
        jobs is stored any more: job retention (completed / cancelled TTLs and caps, purges)
        decides when a finished workflow goes; a running one always has a stored job. At
        most once per ``SWEEP_EVERY`` seconds: it reads every node row."""
        if now < self._wf_sweep_at + SWEEP_EVERY:
            return 0
        self._wf_sweep_at = now
        gone = [row[0] for row in tx.conn.execute(_GONE, (SWEEP_BATCH,)).fetchall()]
        for workflow in gone:
            tx.conn.execute(
                "DELETE FROM wf_edges WHERE child IN (SELECT id FROM wf_nodes WHERE workflow = ?)",
                (workflow,),
            )
            tx.conn.execute("DELETE FROM wf_nodes WHERE workflow = ?", (workflow,))
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
        """Jobs, nodes and edges with the caller's connection, in its transaction (same file;
        ``sqlite_txn``: a savepoint keeps a refused store from touching the caller's work)."""
        from .sqlite_txn import enqueue_in_transaction

        def graph(tx: Tx) -> None:
            store(tx, nodes, edges)

        enqueue_in_transaction(cast("SqliteBroker", self), connection, jobs, payloads, graph)

    def enqueue_workflow(
        self,
        jobs: Sequence[Job],
        payloads: Sequence[bytes],
        nodes: Sequence[FlowNode],
        edges: Sequence[FlowEdge],
        now: float,
    ) -> None:
        """Jobs, nodes and edges in one transaction."""
        b = cast("SqliteBroker", self)
        with b._write() as tx:
            b._insert(tx, jobs, now, payloads)
            store(tx, nodes, edges)

    def workflow_jobs(self, workflow_id: str) -> list[Job]:
        """The workflow's stored nodes, in enqueue order."""
        b = cast("SqliteBroker", self)
        with b._write() as tx:
            ids = member_ids(tx, workflow_id)
            found = {
                r.job.id: r.job
                for r in b._rows(
                    tx,
                    "id IN (SELECT id FROM wf_nodes WHERE workflow = ?)",
                    (workflow_id,),
                    full=True,
                )
            }
        return [found[i] for i in ids if i in found]

    def workflow_edges(self, workflow_id: str) -> list[FlowEdge]:
        """The workflow's edges."""
        b = cast("SqliteBroker", self)
        with b._write() as tx:
            return edges_of(tx, workflow_id)

    def requeue_node(self, job_id: str, now: float) -> bool:
        """Requeue; a node that never got its parents' results reads them now, in the same
        transaction (``WorkflowStore``)."""
        b = cast("SqliteBroker", self)
        with b._write() as tx:
            ops = SqliteFlow(b, tx, now)
            if ops.state(job_id) in _REVIVABLE and ops.pending(job_id) > 0:
                return ops.requeue(job_id)
        return b.requeue(job_id, now)  # not a node waiting for results: as usual

    def cancel_workflow(self, workflow_id: str, now: float) -> int:
        """Cancel the nodes that have not started, in one transaction."""
        b = cast("SqliteBroker", self)
        with b._write() as tx:
            where = (
                "id IN (SELECT id FROM wf_nodes WHERE workflow = ?) AND state IN"
                " ('waiting', 'pending', 'scheduled', 'retry_scheduled')"
            )
            recs = b._rows(tx, where, (workflow_id,))
            ops = SqliteFlow(b, tx, now)
            for rec in recs:
                if ops.state(rec.job.id) not in _CANCELLABLE:
                    continue  # ended by the cascade of an earlier one
                rec = b._rows(tx, "id = ?", (rec.job.id,))[0]
                lifecycle.cancel(rec.job, now)
                b._save(tx, rec)
                tx.emit("cancelled", rec.job, now)
                ops.done(rec.job)
            return len(recs)


_REVIVABLE = (JobState.DEAD_LETTER, JobState.CANCELLED, JobState.EXPIRED)
_CANCELLABLE = (JobState.WAITING, JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
