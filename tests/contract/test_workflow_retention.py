"""Contract: the graph records of a finished workflow follow its jobs out (issue 16, session 5).

A workflow's graph records (nodes, edges, the parents' results copied on the edges, the index)
are dropped once none of its jobs is stored any more: its completed and cancelled nodes are
dropped by the job retention (``completed_ttl`` / ``cancelled_ttl``), dead letters when purged.
A running workflow keeps every record, also those of parents whose jobs retention dropped
already (their results still reach the children).
"""

from __future__ import annotations

from typing import Any

from conveyor import Conveyor, FakeClock, JobState, chain
from conveyor.broker.sqlite import SqliteBroker

DAY = 24 * 3600.0


def records(app: Conveyor, workflow_id: str, ids: list[str]) -> int:
    """How many graph records of the workflow the backend still holds."""
    b: Any = app.broker
    if isinstance(b, SqliteBroker):
        with b._write() as tx:
            sql = "SELECT COUNT(*) FROM wf_nodes WHERE workflow = ?"
            nodes = tx.conn.execute(sql, (workflow_id,)).fetchone()[0]
            marks = ",".join("?" * len(ids))
            sql = f"SELECT COUNT(*) FROM wf_edges WHERE child IN ({marks}) OR parent IN ({marks})"
            return int(nodes + tx.conn.execute(sql, (*ids, *ids)).fetchone()[0])
    if type(b).__name__ == "PostgresBroker":  # not imported: psycopg is an extra
        with b._write() as tx:
            sql = "SELECT COUNT(*) FROM {S}.wf_nodes WHERE workflow = %s"
            nodes = tx.conn.execute(b.sql(sql), (workflow_id,)).fetchone()[0]
            sql = "SELECT COUNT(*) FROM {S}.wf_edges WHERE child = ANY(%s) OR parent = ANY(%s)"
            return int(nodes + tx.conn.execute(b.sql(sql), (ids, ids)).fetchone()[0])
    if hasattr(b, "flow"):  # memory
        f = b.flow
        held = [i for i in ids if i in f._nodes or i in f._in or i in f._out]
        return len(held) + int(workflow_id in f.members)
    queues = {j: "default" for j in ids}
    keys = [b.keys.workflow(workflow_id)] + [b.keys.wf_node(q, j) for j, q in queues.items()]
    return int(b.client.exists(*keys))


def test_a_finished_workflow_s_records_go_after_the_ttl(app: Conveyor, clock: FakeClock) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    @app.task
    def double(x: int) -> int:
        return 2 * x

    done = chain(add.s(1, 2), double.s()).enqueue()
    app.worker().run_until_idle()
    assert done.result() == 6
    assert records(app, done.id, done.ids) > 0
    clock.advance(DAY - 60)
    app.broker.reap_expired(clock.now())
    assert records(app, done.id, done.ids) > 0, "kept while its jobs are kept"
    clock.advance(120)
    app.broker.reap_expired(clock.now())  # its completed jobs go: so does its graph
    assert [app.broker.get(i) for i in done.ids] == [None, None]
    app.broker.reap_expired(clock.now())
    assert records(app, done.id, done.ids) == 0
    assert app.broker.workflow_edges(done.id) == []


def test_a_running_workflow_keeps_its_records(app: Conveyor, clock: FakeClock) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    @app.task
    def total(xs: list[int]) -> int:
        return sum(xs)

    dag = app.workflow(name="slow")
    a = dag.add(add.s(1, 2))
    b = dag.add(add.options(delay=3 * DAY).s(10, 20))
    dag.add(total.s(), after=[a, b])
    flow = dag.enqueue()
    app.worker().run_until_idle()  # a completes; b is scheduled; the callback waits
    before = records(app, flow.id, flow.ids)
    clock.advance(2 * DAY)
    app.broker.reap_expired(clock.now())
    app.broker.reap_expired(clock.now())
    assert app.broker.get(flow.ids[0]) is None  # a's job is gone (completed_ttl)...
    assert records(app, flow.id, flow.ids) == before  # ...its records are not
    clock.advance(DAY + 1)
    app.worker().run_until_idle()
    assert flow.result() == 33  # a's result still reached the callback
    assert app.broker.get(flow.ids[2]).state is JobState.COMPLETED


def test_a_finished_workflow_whose_jobs_retention_dropped_is_done_not_pending(
    app: Conveyor, clock: FakeClock
) -> None:
    # `result()` said WorkflowPending ("has not finished") and `done()` stayed False for ever
    # (a polling loop never ended; `wait()` returned at once into the same answer); a job
    # handle of a dropped job raises JobNotFound
    import pytest

    from conveyor import JobNotFound

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    flow = chain(add.s(1, 2), add.s(4)).enqueue()
    app.worker().run_until_idle()
    assert flow.done() and flow.result() == 7
    clock.advance(DAY + 60)
    app.broker.reap_expired(clock.now())  # completed_ttl: both jobs go
    assert flow.jobs() == []
    assert flow.done()
    with pytest.raises(JobNotFound) as info:
        flow.result()
    assert info.value.job_id == flow.sinks[0]
    with pytest.raises(JobNotFound):
        flow.wait(timeout=5)


def test_a_batch_whose_jobs_retention_dropped_has_none_pending(
    app: Conveyor, clock: FakeClock
) -> None:
    # status() counted every job it could not find any more as pending: a loop waiting for
    # "pending == 0" never ended once retention dropped the finished jobs
    @app.task
    def work(n: int) -> int:
        return n

    with app.batch() as b:
        work.enqueue(1)
        work.enqueue(2)
    app.worker().run_until_idle()
    assert b.status() == {"total": 2, "pending": 0, "completed": 2, "failed": 0}
    clock.advance(DAY + 60)
    app.broker.reap_expired(clock.now())
    assert b.status()["pending"] == 0 and b.status()["total"] == 2


def test_an_expired_batch_job_counts_as_failed_not_pending(app: Conveyor, clock: FakeClock) -> None:
    @app.task
    def work(n: int) -> int:
        return n

    with app.batch() as b:
        work.options(expires_in=10).enqueue(1)
        work.enqueue(2)
    clock.advance(60)
    app.worker().run_until_idle()
    assert b.status() == {"total": 2, "pending": 0, "completed": 1, "failed": 1}
