"""Contract: every enqueue inside an open ``app.batch(...)`` joins it (issue 16, session 5).

``enqueue_async`` / ``enqueue_many_async`` are collected like ``enqueue`` (also under
``async with app.batch(...)``). A job enqueued with ``connection=`` joins only a batch stored
in that same transaction (``app.batch(..., connection=conn)``, SQLite: tests/sqlite/
test_batch_txn.py); anything else is refused with a ``ValidationError`` naming ``connection``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.errors import ValidationError


def tasks(app: Conveyor) -> Any:
    calls: list[str] = []

    class T:
        seen = calls

        @app.task
        def double(x: int) -> int:
            return 2 * x

        @app.task
        def note(what: str) -> None:
            calls.append(what)

    return T


def _stored(app: Conveyor) -> int:
    return sum(sum(c.values()) for c in app.broker.counts().values())


def test_async_enqueues_join_an_open_batch(app: Conveyor) -> None:
    t = tasks(app)

    async def main() -> Any:
        with app.batch(on_complete=t.note.s("sync block")) as b:
            one = await t.double.enqueue_async(1)
            many = await app.enqueue_many_async([t.double.s(2), t.double.s(3)])
            assert _stored(app) == 0  # kept until the block ends
        async with app.batch(on_complete=t.note.s("async block")) as b2:
            await t.double.enqueue_async(4)
        return b, b2, [one, *many]

    b, b2, handles = asyncio.run(main())
    assert b.status()["total"] == 3 and b2.status()["total"] == 1
    app.worker().run_until_idle()
    assert sorted(t.seen) == ["async block", "sync block"]
    assert [h.refresh().result for h in handles] == [2, 4, 6]


def test_a_transactional_enqueue_inside_a_plain_batch_is_refused(app: Conveyor) -> None:
    t = tasks(app)
    conn = sqlite3.connect(":memory:")
    with pytest.raises(ValidationError) as info, app.batch(on_complete=t.note.s("x")):
        t.double.options(connection=conn).enqueue(1)
    assert info.value.field == "connection" and "app.batch(" in info.value.rule
    assert _stored(app) == 0


def test_a_batch_in_a_transaction_is_refused_where_it_cannot_be_stored(
    app: Conveyor, backend: str
) -> None:
    if backend in ("sqlite", "postgres"):
        pytest.skip("SQLite and PostgreSQL store it (tests/sqlite, tests/postgres)")
    t = tasks(app)
    with pytest.raises(ValidationError) as info:
        app.batch(on_complete=t.note.s("x"), connection=sqlite3.connect(":memory:"))
    assert info.value.field == "connection"


@pytest.mark.parametrize("bad", [123, "x" * 201, None, ["a"]])
def test_a_batch_name_is_checked_as_a_workflow_name(app: Conveyor, bad: Any) -> None:
    """``app.batch(name=...)`` stored any value in every job's metadata (a workflow's
    ``enqueue(name=)`` takes a string of at most 200 characters)."""
    with pytest.raises(ValidationError, match=r"^name: "):
        app.batch(name=bad)
