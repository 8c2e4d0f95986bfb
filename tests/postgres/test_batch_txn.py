"""A batch stored inside the caller's PostgreSQL transaction (issue 16, session 5).

``app.batch(..., connection=conn)`` with a psycopg connection stores its jobs, callbacks and
graph records, when the block ends, on the caller's connection inside its transaction: they
commit or roll back with the caller's rows, and the callback fires once after a commit. A job
enqueued inside with ``connection=conn`` joins it; another connection, or a connection of
another driver, is refused with a ``ValidationError`` naming ``connection``.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.errors import ValidationError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def app(pg: PostgresBroker) -> Iterator[Conveyor]:
    app = Conveyor(pg, rng=random.Random(5))  # type: ignore[arg-type]
    calls: list[str] = []

    @app.task(name="import_row")
    def import_row(n: int) -> int:
        return n

    @app.task(name="notify")
    def notify(what: str) -> None:
        calls.append(what)

    app.calls = calls  # type: ignore[attr-defined]
    yield app
    app.close()


def _stored(app: Conveyor) -> int:
    return sum(sum(c.values()) for c in app.broker.counts().values())


def _graph_rows(pg: PostgresBroker) -> int:
    with pg._write() as tx:
        sql = "SELECT (SELECT count(*) FROM {S}.wf_nodes) + (SELECT count(*) FROM {S}.wf_edges)"
        return int(tx.conn.execute(pg.sql(sql)).fetchone()[0])


def test_a_batch_commits_and_rolls_back_with_the_callers_transaction(
    app: Conveyor, pg: PostgresBroker, conn: Any
) -> None:
    row, notify = app.tasks["import_row"], app.tasks["notify"]
    conn.execute("INSERT INTO orders VALUES (1, 'rolled back')")
    with app.batch(on_complete=notify.s("imported"), connection=conn):
        row.options(connection=conn).enqueue(1)  # joins: the same transaction
        row.enqueue(2)  # a plain enqueue joins too
    assert _stored(app) == 0 and _graph_rows(pg) == 0  # invisible before the commit
    conn.rollback()
    assert _stored(app) == 0 and _graph_rows(pg) == 0
    conn.execute("INSERT INTO orders VALUES (1, 'kept')")
    with app.batch(on_complete=notify.s("imported"), connection=conn) as b:
        row.options(connection=conn).enqueue(1)
        row.enqueue(2)
    conn.commit()
    assert _stored(app) == 3 and _graph_rows(pg) > 0
    app.worker().run_until_idle()
    assert app.calls == ["imported"] and b.status()["completed"] == 2  # type: ignore[attr-defined]


def test_another_connection_inside_a_transactional_batch_is_refused(
    app: Conveyor, pg: PostgresBroker, conn: Any, pg_server: Any
) -> None:
    row, notify = app.tasks["import_row"], app.tasks["notify"]
    with (
        psycopg.connect(pg_server.url) as other,
        pytest.raises(ValidationError, match="connection"),
        app.batch(on_complete=notify.s("x"), connection=conn),
    ):
        row.options(connection=other).enqueue(1)
    conn.rollback()
    assert _stored(app) == 0


def test_a_connection_of_another_driver_is_refused_clearly(app: Conveyor) -> None:
    notify, row = app.tasks["notify"], app.tasks["import_row"]
    other = sqlite3.connect(":memory:")
    with (
        pytest.raises(ValidationError) as info,
        app.batch(on_complete=notify.s("x"), connection=other),
    ):
        row.enqueue(1)
    assert info.value.field == "connection" and "psycopg" in info.value.rule
    assert _stored(app) == 0
