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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ..core import lifecycle
from ..core.job import Job
from ..core.state import JobState
from . import flow
from .flow import FlowEdge, FlowNode, Input
from .sqldb import Db

#: job ids per ``done_many`` query (far below SQLite's bound-parameter limit)
_IN_CHUNK = 500
CANCELLABLE = (JobState.WAITING, JobState.PENDING, JobState.SCHEDULED, JobState.RETRY_SCHEDULED)


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
        ok = job.state is JobState.COMPLETED
        flow.finished(self, job.id, ok, job.result if ok else None)

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
        sql = "SELECT child, policy FROM {S}.wf_edges WHERE parent = ? AND done = 0"
        return [(c, p) for c, p in self._db.run(sql, (parent,)).fetchall()]

    def mark(self, parent: str, child: str, ok: bool, result: Any) -> bool:
        """Record the edge's outcome once (no row changes the second time)."""
        cur = self._db.run(
            "UPDATE {S}.wf_edges SET done = 1, ok = ?, result = ? WHERE parent = ? AND child = ?"
            " AND done = 0",
            (int(ok), orjson.dumps(result), parent, child),
        )
        return int(cur.rowcount) == 1

    def node(self, child: str) -> FlowNode | None:
        """The node's row."""
        sql = "SELECT id, workflow, pending, passing, trig FROM {S}.wf_nodes WHERE id = ?"
        row = self._db.run(sql, (child,)).fetchone()
        return None if row is None else FlowNode(*row)

    def state(self, child: str) -> JobState | None:
        """The child job's state column."""
        row = self._db.run("SELECT state FROM {S}.jobs WHERE id = ?", (child,)).fetchone()
        return None if row is None else JobState(row[0])

    def decrement(self, child: str) -> int:
        """One parent fewer; how many remain."""
        sql = "UPDATE {S}.wf_nodes SET pending = pending - 1 WHERE id = ? RETURNING pending"
        return int(self._db.run(sql, (child,)).fetchone()[0])

    def inputs(self, child: str) -> list[Input]:
        """Parents' outcomes in edge order."""
        sql = "SELECT ok, result, policy FROM {S}.wf_edges WHERE child = ? ORDER BY pos"
        return [
            Input(bool(ok), None if result is None else orjson.loads(result), policy)
            for ok, result, policy in self._db.run(sql, (child,)).fetchall()
        ]

    def release(self, child: str, inputs: list[Any]) -> None:
        """waiting -> pending, the inputs written into the envelope's arguments."""
        [rec] = self._db.rows("id = ?", (child,), full=True)
        lifecycle.release_parents(rec.job, self._now, inputs)
        if rec.data is not None:
            rec.data["args"] = rec.job.args
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
                " ('waiting', 'pending', 'scheduled', 'retry_scheduled')"
            )
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
