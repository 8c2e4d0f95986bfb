"""Contract: the issue's spelling of workflow steps, ``task.s(...)`` (issue 16, session 5).

``chain(fetch.s(url), parse.s(), store.s())``: a ``.s()`` step placed after another gets the
upstream result as its first argument (its own arguments follow); the binding is checked when
the workflow is built, with that first slot reserved. ``.partial()`` is the explicit form,
``.si()`` the immutable one (its own arguments only).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from conveyor import Conveyor, chain, chord, group
from conveyor.errors import ValidationError


def tasks(app: Conveyor) -> Any:
    class T:
        @app.task
        def fetch(url: str) -> str:
            return f"<{url}>"

        @app.task
        def parse(html: str) -> int:
            return len(html)

        @app.task
        def store(size: int, where: str = "db") -> str:
            return f"{size}@{where}"

        @app.task
        def score(doc: str) -> int:
            return len(doc)

        @app.task
        def summarize(scores: list[int], label: str = "sum") -> str:
            return f"{label}={sum(scores)}"

        @app.task
        def ping() -> str:
            return "pong"

        @app.task
        def add(a: int, b: int) -> int:
            return a + b

    return T


def test_chain_of_s_steps_passes_each_result_first(app: Conveyor) -> None:
    t = tasks(app)
    flow = chain(t.fetch.s("ab"), t.parse.s(), t.store.s(where="s3")).enqueue()  # no app=
    app.worker().run_until_idle()
    assert flow.wait(timeout=5) == "4@s3"
    assert [j.args for j in flow.jobs()] == [["ab"], ["<ab>"], [4]]


def test_chord_and_dag_with_s_steps(app: Conveyor) -> None:
    t = tasks(app)
    both = chord(group(t.score.s(d) for d in ("a", "bb", "ccc")), t.summarize.s("total"))
    handle = both.enqueue()
    dag = app.workflow(name="nightly")
    a = dag.add(t.fetch.s("x"))
    b = dag.add(t.parse.s(), after=[a])
    dag.add(t.store.s(), after=[b])
    nightly = dag.enqueue()
    app.worker().run_until_idle()
    assert handle.result() == "total=6"
    assert nightly.result() == "3@db"


def test_partial_still_works_and_si_takes_no_result(app: Conveyor) -> None:
    t = tasks(app)
    flow = chain(t.fetch.s("ab"), t.parse.partial(), t.store.si(7)).enqueue()
    app.worker().run_until_idle()
    assert flow.result() == "7@db"  # .si(): its own arguments only


def test_an_s_step_missing_its_first_argument_with_nothing_before_it_is_refused(
    app: Conveyor,
) -> None:
    t = tasks(app)
    with pytest.raises(ValidationError) as info:
        chain(t.parse.s(), t.store.s()).enqueue()
    assert info.value.field == "html" and "parse" in info.value.rule
    with pytest.raises(ValidationError, match="html"):
        app.enqueue_many([t.parse.s()])  # a JobSpec for enqueue_many needs every argument
    with pytest.raises(ValidationError, match="html"), app.batch(on_complete=t.parse.s()):
        pass  # a batch callback gets no result
    with pytest.raises(ValidationError, match="at most 2"):
        t.store.s(1, 2, 3)  # neither with nor without the upstream slot
    assert sum(sum(c.values()) for c in app.broker.counts().values()) == 0


def test_a_complete_s_step_that_cannot_take_the_result_warns_and_gets_none(
    app: Conveyor,
) -> None:
    """The session-4 meaning (an immutable ``.s()``) still runs, with a FutureWarning naming
    the task; ``.si()`` says it without a warning."""
    t = tasks(app)
    with pytest.warns(FutureWarning, match=r"ping.*\.si\("):
        flow = chain(t.fetch.s("ab"), t.ping.s()).enqueue()
    with pytest.warns(FutureWarning, match="add"):
        flow2 = chain(t.fetch.s("ab"), t.add.s(1, 2)).enqueue()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chain(t.fetch.s("ab"), t.ping.si()).enqueue()
    app.worker().run_until_idle()
    assert flow.result() == "pong" and flow2.result() == 3
