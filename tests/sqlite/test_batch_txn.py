"""A batch stored inside the caller's SQLite transaction (issue 16, session 5).

``app.batch(..., connection=conn)`` stores its jobs and callbacks, when the block ends, with
the caller's connection inside its transaction (same file): they commit or roll back with the
caller's rows. Jobs enqueued inside with ``connection=conn`` join it; another connection is
refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.errors import ValidationError


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Conveyor, Path, list[str]]]:
    path = tmp_path / "app.db"
    app = Conveyor(f"sqlite:///{path}")
    calls: list[str] = []

    @app.task(name="import_row")
    def import_row(n: int) -> int:
        return n

    @app.task(name="notify")
    def notify(what: str) -> None:
        calls.append(what)

    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY)")
    yield app, path, calls
    app.close()


def _stored(app: Conveyor) -> int:
    return sum(sum(c.values()) for c in app.broker.counts().values())


def test_a_batch_commits_and_rolls_back_with_the_callers_transaction(shared: Any) -> None:
    app, path, calls = shared
    row, notify = app.tasks["import_row"], app.tasks["notify"]
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO rows (id) VALUES (1)")
    with app.batch(on_complete=notify.s("imported"), connection=conn) as b:
        row.options(connection=conn).enqueue(1)  # joins: the same transaction
        row.enqueue(2)  # a plain enqueue joins too
    assert _stored(app) == 0  # not committed yet: other connections see nothing
    conn.rollback()
    assert _stored(app) == 0
    conn.execute("INSERT INTO rows (id) VALUES (1)")
    with app.batch(on_complete=notify.s("imported"), connection=conn) as b:
        row.options(connection=conn).enqueue(1)
        row.enqueue(2)
    conn.commit()
    assert _stored(app) == 3
    app.worker().run_until_idle()
    assert calls == ["imported"] and b.status()["completed"] == 2
    conn.close()


def test_another_connection_inside_a_transactional_batch_is_refused(shared: Any) -> None:
    app, path, _ = shared
    row, notify = app.tasks["import_row"], app.tasks["notify"]
    conn, other = sqlite3.connect(path), sqlite3.connect(path)
    with (
        pytest.raises(ValidationError, match="connection"),
        app.batch(on_complete=notify.s("x"), connection=conn),
    ):
        row.options(connection=other).enqueue(1)
    conn.rollback()
    assert _stored(app) == 0
