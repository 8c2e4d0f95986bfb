"""Operator actions on workflow nodes (contract; every backend that runs workflows — Redis
Cluster refuses workflows, so tests/redis/test_cluster_contract.py leaves this module out):
searches and bulk actions see waiting nodes, and an unfinished node cannot be deleted."""

from __future__ import annotations

from conveyor import Conveyor
from conveyor.monitoring.actions import Operator


def test_a_search_lists_waiting_workflow_nodes(app: Conveyor) -> None:
    """Redis raised ``search: unknown set waiting`` for every search that looked at waiting
    workflow nodes, i.e. any search without a state while a workflow ran (the jobs page, ``conveyor
    jobs``, a bulk action by task or queue)."""
    from conveyor import chain

    first = app.task(name="first")(lambda: 1)
    then = app.task(name="then")(lambda x: x)
    chain(first.s(), then.s()).enqueue()
    assert app.search().total == 2
    [node] = app.search(state="waiting").items
    assert node.task == "then"
    result = Operator(app).bulk("cancel", filters={"task": "then"})
    assert (result.matched, result.done) == (1, 1)


def test_deleting_an_unfinished_workflow_node_is_refused(app: Conveyor) -> None:
    """A deleted waiting (or pending) node never finishes, so the nodes after it waited for
    ever (docs/workflows.md: workflows never hang). Deleting an unfinished node is refused like
    a running job (cancel it: its dependants end with it); a finished one can go."""
    from conveyor import chain

    first = app.task(name="first")(lambda: 1)
    then = app.task(name="then")(lambda x: x + 1)
    last = app.task(name="last")(lambda x: x + 1)
    flow = chain(first.s(), then.s(), last.s()).enqueue()
    nodes = {job.task: job.id for job in app.search().items}
    op = Operator(app)
    result = op.bulk("delete", ids=[nodes["then"], nodes["first"]])
    assert (result.matched, result.done) == (2, 0)
    assert not op.delete(nodes["last"], unfinished=True)
    app.worker().run_until_idle()
    assert flow.status()["completed"] == 3
    assert op.delete(nodes["then"], unfinished=True), "a finished node can be deleted"
