"""Contract: chains, groups, chords, DAGs, failure policies, nested workflows, cancel (issue 16).

Every node is stored at enqueue (waiting ones in ``waiting``); finishing a node releases its
dependants in the same atomic step, on every backend.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import (
    Conveyor,
    ErrorKind,
    JobState,
    PermanentError,
    WorkflowFailed,
    WorkflowPending,
    chain,
    chord,
    group,
)
from conveyor.errors import ValidationError


def tasks(app: Conveyor) -> Any:
    class T:
        @app.task
        def add(a: int, b: int) -> int:
            return a + b

        @app.task
        def double(x: int) -> int:
            return 2 * x

        @app.task
        def total(xs: list[int]) -> int:
            return sum(xs)

        @app.task
        def echo(*xs: Any) -> list[Any]:
            return list(xs)

        @app.task(max_attempts=1)
        def boom(*_: Any) -> None:
            raise PermanentError("boom")

    return T


def test_chain_passes_each_result_to_the_next(app: Conveyor) -> None:
    t = tasks(app)
    flow = chain(t.add.partial(1, 2), t.double.partial(), t.add.partial(10)).enqueue()
    states = [j.state for j in flow.jobs()]
    assert states == [JobState.PENDING, JobState.WAITING, JobState.WAITING]
    with pytest.raises(WorkflowPending):
        flow.result()
    app.worker().run_until_idle()
    assert flow.result() == 16  # (1+2)*2 + 10
    assert [j.args for j in flow.jobs()] == [[1, 2], [3], [6, 10]]


def test_group_and_chord(app: Conveyor) -> None:
    t = tasks(app)
    fan = group(t.double.partial(i) for i in range(5)).enqueue()
    both = chord(group(t.double.partial(i) for i in range(5)), t.echo.partial("tail")).enqueue()
    app.worker().run_until_idle()
    assert fan.result() == [0, 2, 4, 6, 8]
    assert both.result() == [[0, 2, 4, 6, 8], "tail"]
    assert both.status()["completed"] == 6


def test_dag_with_diamond_dependencies(app: Conveyor) -> None:
    t = tasks(app)
    dag = app.workflow(name="nightly")
    a = dag.add(t.add.partial(1, 1))
    b = dag.add(t.double.partial(), after=[a])
    c = dag.add(t.add.partial(100), after=[a])
    d = dag.add(t.total.partial(), after=[b, c])
    dag.add(t.echo.partial(), after=[d], results=False)
    flow = dag.enqueue()
    worker = app.worker()
    worker.run_until_idle()
    jobs = flow.jobs()
    assert [j.state for j in jobs] == [JobState.COMPLETED] * 5
    assert jobs[3].args == [[4, 102]] and jobs[3].result == 106
    assert flow.result() == []
    assert all(j.metadata["workflow"]["name"] == "nightly" for j in jobs)


def test_fail_the_rest_names_the_failed_parent(app: Conveyor) -> None:
    t = tasks(app)
    flow = chain(t.boom.partial(), t.double.partial(), t.double.partial()).enqueue()
    app.worker().run_until_idle()
    first, second, third = flow.jobs()
    assert first.state is JobState.DEAD_LETTER
    assert second.state is third.state is JobState.CANCELLED
    assert second.errors[-1]["kind"] == ErrorKind.UPSTREAM_FAILED
    assert second.errors[-1]["parent"] == first.id and first.id in (second.last_error or "")
    assert third.errors[-1]["parent"] == second.id
    with pytest.raises(WorkflowFailed) as info:
        flow.result()
    assert info.value.job.id == first.id


def test_continue_and_ignore_policies(app: Conveyor) -> None:
    t = tasks(app)
    cont = chord([t.boom.partial(), t.double.partial(2)], t.echo.partial()).enqueue(
        policy="continue"
    )
    ign = chord([t.boom.partial(), t.double.partial(2)], t.echo.partial()).enqueue(policy="ignore")
    app.worker().run_until_idle()
    assert cont.result() == [[None, 4]]
    assert ign.result() == [[4]]
    dag = app.workflow()
    bad = dag.add(t.boom.partial())
    ok = dag.add(t.double.partial(3))
    dag.add(t.echo.partial(), after=[bad, ok], policy="continue")
    flow = dag.enqueue()
    app.worker().run_until_idle()
    assert flow.result() == [[None, 6]]


def test_nested_workflows(app: Conveyor) -> None:
    t = tasks(app)
    inner = app.workflow()
    x = inner.add(t.double.partial())
    inner.add(t.double.partial(), after=[x])
    outer = chain(
        t.add.partial(1, 0),
        group(chain(t.double.partial(), t.double.partial()), t.add.partial(5)),
        t.total.partial(),
        inner,
    ).enqueue()
    app.worker().run_until_idle()
    assert outer.result() == (4 + 6) * 4
    assert len(outer.jobs()) == 7


def test_cancel_a_workflow(app: Conveyor) -> None:
    t = tasks(app)
    flow = chain(t.double.partial(1), t.double.partial(), t.double.partial()).enqueue()
    assert flow.cancel() >= 2
    assert {j.state for j in flow.jobs()} == {JobState.CANCELLED}
    assert app.worker().run_until_idle() == 0


def test_completion_after_a_lost_lease_releases_once(app: Conveyor, clock: Any) -> None:
    """Fencing: the first worker's late completion is refused, the dependant runs once."""
    t = tasks(app)
    flow = chord([t.double.partial(1)], t.echo.partial()).enqueue()
    broker = app.broker
    [old] = broker.claim(["default"], clock.now(), visibility_timeout=5)
    clock.advance(6)
    [new] = broker.claim(["default"], clock.now(), visibility_timeout=5)
    assert new.job.id == old.job.id
    from conveyor.broker.base import Ack

    assert broker.complete([Ack(old.id, old.token, 99, "default")], clock.now()) == [False]
    assert broker.complete([Ack(new.id, new.token, 2, "default")], clock.now()) == [True]
    assert broker.complete([Ack(new.id, new.token, 2, "default")], clock.now()) == [False]
    callback = flow.jobs()[1]
    assert callback.state is JobState.PENDING and callback.args == [[2]]
    app.worker().run_until_idle()
    assert flow.result() == [[2]]


def test_bad_input_is_refused_clearly(app: Conveyor) -> None:
    t = tasks(app)
    with pytest.raises(ValidationError, match="chain"):
        chain(t.add)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="policy"):
        chain(t.add.partial(1, 2)).enqueue(policy="explode")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="idempotency_key"):
        chain(t.add.options(idempotency_key="k").partial(1, 2)).enqueue()
    with pytest.raises(ValidationError, match="group"):
        group([])
    assert app.broker.counts().get("default", {}).get("pending", 0) == 0


def test_batch_callbacks_fire_once(app: Conveyor) -> None:
    t = tasks(app)
    calls: list[str] = []

    @app.task
    def note(what: str) -> None:
        calls.append(what)

    with app.batch(
        on_complete=note.partial("complete"),
        on_success=note.partial("success"),
        on_failure=note.partial("failure"),
    ) as b:
        handles = [t.double.enqueue(i) for i in range(4)]
        assert app.broker.get(handles[0].id) is None  # stored when the block ends
    assert b.status() == {"total": 4, "pending": 4, "completed": 0, "failed": 0}
    worker = app.worker()
    worker.run_until_idle()
    assert sorted(calls) == ["complete", "success"]
    assert b.status() == {"total": 4, "pending": 0, "completed": 4, "failed": 0}
    assert [h.refresh().result for h in handles] == [0, 2, 4, 6]
    worker.run_until_idle()
    assert sorted(calls) == ["complete", "success"]  # once

    calls.clear()
    with app.batch(
        on_complete=note.partial("complete"),
        on_success=note.partial("success"),
        on_failure=note.partial("failure"),
    ) as bad:
        t.double.enqueue(1)
        t.boom.enqueue()
    worker.run_until_idle()
    assert sorted(calls) == ["complete", "failure"]
    assert bad.status() == {"total": 2, "pending": 0, "completed": 1, "failed": 1}


def test_a_batch_block_that_raises_stores_nothing(app: Conveyor) -> None:
    t = tasks(app)
    with pytest.raises(RuntimeError), app.batch(on_complete=t.echo.partial()):
        t.double.enqueue(1)
        raise RuntimeError("producer died")
    assert app.worker().run_until_idle() == 0
    assert sum(sum(c.values()) for c in app.broker.counts().values()) == 0


def test_task_s_is_a_complete_step_that_gets_no_result(app: Conveyor) -> None:
    """A complete ``task.s(...)`` whose function cannot also take the upstream result keeps
    its own arguments (session 4's meaning, now with a FutureWarning: ``.si()`` says it);
    ``task.partial(...)`` is bound at build time with its parents' result first."""
    t = tasks(app)
    with pytest.warns(FutureWarning, match="add"):
        flow = chain(t.add.s(1, 2), t.add.s(5, 5), t.double.partial()).enqueue()
    app.worker().run_until_idle()
    assert flow.result() == 20 and [j.args for j in flow.jobs()] == [[1, 2], [5, 5], [10]]
    with pytest.raises(ValidationError, match="args"):
        chain(t.add.s(1, 2), t.add.partial(1, 2)).enqueue()  # 3 arguments for add(a, b)
    with pytest.raises(ValidationError, match="x"):
        app.enqueue_many([t.double.s()])  # its first argument is left to a previous step


def test_wait_returns_the_last_result_or_raises_the_failure(app: Conveyor) -> None:
    import threading

    from conveyor.errors import WaitTimeout

    t = tasks(app)
    flow = chain(t.add.s(1, 2), t.double.partial()).enqueue()
    with pytest.raises(WaitTimeout):
        flow.wait(timeout=0.05)
    runner = threading.Thread(target=app.worker().run_until_idle)
    runner.start()
    assert flow.wait(timeout=30) == 6
    runner.join(30)
    bad = chain(t.boom.s(), t.double.partial()).enqueue()
    app.worker().run_until_idle()
    with pytest.raises(WorkflowFailed) as info:
        bad.wait(timeout=5)
    assert info.value.job.id == bad.ids[0]


def test_a_result_that_could_not_be_stored_is_never_passed_on_as_none(app: Conveyor) -> None:
    # the worker completes a job whose result cannot be stored WITHOUT it (result_error);
    # its dependants ran with None in its place and the workflow reported success
    t = tasks(app)
    seen: list[Any] = []

    @app.task
    def unstorable() -> object:
        return object()

    @app.task
    def take(x: Any) -> str:
        seen.append(x)
        return "took"

    @app.task
    def plain() -> str:
        return "plain"

    failing = chain(unstorable.s(), take.s()).enqueue()
    carry_on = chain(unstorable.s(), take.s()).enqueue(policy="continue")
    no_result = chain(unstorable.s(), plain.si()).enqueue()  # takes no result: runs
    last = chain(t.add.s(1, 2), unstorable.si()).enqueue()
    app.worker().run_until_idle()
    first, second = failing.jobs()
    assert first.state is JobState.COMPLETED and first.errors[-1]["kind"] == "result_error"
    assert second.state is JobState.CANCELLED
    assert second.errors[-1]["kind"] == ErrorKind.UPSTREAM_FAILED
    assert second.errors[-1]["parent"] == first.id
    with pytest.raises(WorkflowFailed) as info:
        failing.result()
    assert info.value.job.id == first.id
    with pytest.raises(ValidationError, match=first.id):  # it has no result to run with
        app.requeue_dead(second.id)
    assert seen == [None]  # only the "continue" chain's step ran: None is that policy's slot
    assert carry_on.result() == "took" and no_result.result() == "plain"
    with pytest.raises(WorkflowFailed, match="without its result") as info:
        last.result()  # job.wait() raises JobFailed for the same job
    assert info.value.job.id == last.sinks[0]


@pytest.mark.parametrize(
    "option",
    [{"unique": "while_queued"}, {"unique": "until_done"}, {"debounce": 5.0}],
    ids=["while_queued", "until_done", "debounce"],
)
def test_a_deduplicating_node_is_refused_like_an_idempotency_key(
    app: Conveyor, option: dict[str, Any]
) -> None:
    # unique= / debounce= ride on idempotency keys, which workflow nodes cannot have: the
    # second workflow's node was deduplicated into the first's job, never stored, and its
    # dependant waited for ever (result() said WorkflowPending for ever)
    t = tasks(app)
    chain(t.add.partial(1, 2), t.double.partial()).enqueue()
    with pytest.raises(ValidationError) as info:
        chain(t.add.options(**option).partial(1, 2), t.double.partial()).enqueue()
    assert info.value.field == next(iter(option))
    assert sum(sum(s.values()) for s in app.broker.counts().values()) == 2  # nothing stored


def test_a_node_id_already_taken_refuses_the_whole_workflow(app: Conveyor) -> None:
    # Redis wrote a node over an existing job of the same id (its state, payload and sets:
    # a running or finished job became pending again) and stored two nodes of one id; the
    # other backends refuse the workflow with DuplicateJob, nothing stored
    from conveyor import DuplicateJob

    t = tasks(app)
    done = app.enqueue("add", args=[1, 1], job_id="taken")
    chain(t.add.options(job_id="node").partial(1, 2), t.double.partial()).enqueue()
    before = app.broker.counts()
    for ids in (["taken", None], ["node", None], ["twin", "twin"]):
        steps = [t.add.options(job_id=i).partial(1, 2) if i else t.add.partial(1, 2) for i in ids]
        with pytest.raises(DuplicateJob):
            group(*steps).enqueue()
    assert app.broker.counts() == before, "nothing stored, nothing changed"
    assert app.get_job(done.id).args == [1, 1] and app.get_job(done.id).state is JobState.PENDING


def test_typed_results_reach_the_dependants_as_they_were_returned(app: Conveyor) -> None:
    # SQLite and PostgreSQL copied a parent's result onto its edges with plain orjson: a
    # Decimal or bytes result made the completion fail (the worker then completed the step
    # WITHOUT its result), and a datetime reached the child as a string
    import datetime as dt
    from decimal import Decimal

    when = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    value = {"when": when, "d": Decimal("1.10"), "b": b"\x00\xff", "s": "\x1b[31m\u202e"}

    @app.task
    def make() -> Any:
        return value

    @app.task
    def check(x: Any) -> list[str]:
        return sorted(f"{k}:{type(v).__name__}" for k, v in x.items()) if x == value else []

    @app.task
    def check_all(xs: list[Any]) -> bool:
        return xs == [value, value]

    one = chain(make.s(), check.s()).enqueue()
    fan = chord(group(make.s(), make.s()), check_all.s()).enqueue()
    app.worker().run_until_idle()
    assert one.result() == ["b:bytes", "d:Decimal", "s:str", "when:datetime"]
    assert fan.result() is True
    (first,) = [j for j in one.jobs() if j.task.endswith("make")]
    assert first.result == value and not first.errors


def test_a_node_listed_twice_in_after_is_refused(app: Conveyor) -> None:
    """``wf.add(step, after=[ref, ref])``: memory stored a node waiting for two releases
    from one edge (it waited for ever); SQLite raised a raw IntegrityError."""
    from conveyor import Workflow

    t = tasks(app)
    wf = Workflow(app)
    first = wf.add(t.add.partial(1, 2))
    with pytest.raises(ValidationError, match=r"^after: "):
        wf.add(t.total.partial(), after=[first, first])
    wf.add(t.double.partial(), after=[first])
    flow = wf.enqueue()
    app.worker().run_until_idle()
    assert flow.result() == 6
