"""Transactional enqueue on SQLite: jobs written with the caller's sqlite3 connection (or a
SQLAlchemy Connection / Session) inside the caller's transaction, on a real shared file.

Rollback -> no job; commit -> a real worker (running in a thread, waiting for work) runs it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.errors import DuplicateJob, ValidationError

DEADLINE = 30.0


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Conveyor, Path, list[int]]]:
    """An app on ``app.db`` whose file also holds the application's ``orders`` table."""
    path = tmp_path / "app.db"
    app = Conveyor(f"sqlite:///{path}")
    ran: list[int] = []

    @app.task(name="ship")
    def ship(order_id: int) -> None:
        ran.append(order_id)

    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    yield app, path, ran
    app.close()


def _job_count(app: Conveyor) -> int:
    return sum(sum(states.values()) for states in app.broker.counts().values())


def _run_worker(app: Conveyor, ran: list[int], want: int) -> None:
    """A real worker (thread) that waits for work; stop it once ``want`` jobs ran."""
    worker = app.worker(handle_signals=False, heartbeat=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while len(ran) < want and time.monotonic() < deadline:
        time.sleep(0.02)
    worker.stop()
    thread.join(DEADLINE)


def test_sqlite3_rollback_leaves_no_job_and_commit_runs(shared: Any) -> None:
    app, path, ran = shared
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("INSERT INTO orders (id, item) VALUES (1, 'lost')")
    app.tasks["ship"].options(connection=conn).enqueue(1)
    assert _job_count(app) == 0  # the broker's own connection cannot see it yet
    conn.rollback()
    assert _job_count(app) == 0
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 0

    conn.execute("INSERT INTO orders (id, item) VALUES (2, 'kept')")
    handle = app.tasks["ship"].options(connection=conn).enqueue(2)
    app.enqueue_many([app.tasks["ship"].spec(3)], connection=conn)
    assert _job_count(app) == 0
    threading.Timer(0.3, conn.commit).start()  # after the worker started waiting for work
    _run_worker(app, ran, 2)
    assert sorted(ran) == [2, 3]
    assert app.get_job(handle.id).state is JobState.COMPLETED
    conn.close()


def test_conflict_rolls_back_only_the_enqueue(shared: Any) -> None:
    app, path, _ = shared
    app.tasks["ship"].options(job_id="fixed").enqueue(0)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO orders (id, item) VALUES (5, 'survives')")
    with pytest.raises(DuplicateJob):
        app.tasks["ship"].options(connection=conn, job_id="fixed").enqueue(5)
    key = app.tasks["ship"].options(connection=conn, idempotency_key="k")
    first, again = key.enqueue(6), key.enqueue(6)
    assert again.duplicate is True and again.id == first.id
    conn.commit()
    assert conn.execute("SELECT item FROM orders").fetchall() == [("survives",)]
    assert _job_count(app) == 2  # "fixed" and the keyed job, once
    conn.close()


def test_other_file_or_missing_schema_is_refused(shared: Any, tmp_path: Path) -> None:
    app, _, _ = shared
    other = sqlite3.connect(tmp_path / "other.db")
    with pytest.raises(ValidationError, match="connection") as info:
        app.tasks["ship"].options(connection=other).enqueue(1)
    assert "not the broker's file" in str(info.value)
    memory = sqlite3.connect(":memory:")
    with pytest.raises(ValidationError, match="connection"):
        app.tasks["ship"].options(connection=memory).enqueue(1)
    auto = sqlite3.connect(app.broker.path, isolation_level=None)  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="autocommit"):
        app.tasks["ship"].options(connection=auto).enqueue(1)
    with pytest.raises(ValidationError, match="connection"):
        app.tasks["ship"].options(connection=object()).enqueue(1)
    assert _job_count(app) == 0


def test_schema_less_file_is_refused(tmp_path: Path) -> None:
    """The same path, but the Conveyor tables are gone (e.g. a fresh copy): a clear error."""
    path = tmp_path / "bare.db"
    app = Conveyor(f"sqlite:///{path}")
    app.task(name="t")(lambda: None)
    app.close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 0")
    raw.commit()
    with pytest.raises(ValidationError, match="no Conveyor schema"):
        app.tasks["t"].options(connection=raw).enqueue()
    raw.close()


def test_memory_backend_points_to_the_outbox() -> None:
    app = Conveyor("memory://")
    app.task(name="t")(lambda: None)
    conn = sqlite3.connect(":memory:")
    with pytest.raises(ValidationError, match=r"connection: .*outbox"):
        app.tasks["t"].options(connection=conn).enqueue()
    with pytest.raises(ValidationError, match="outbox"):
        app.enqueue("t", connection=conn)


sa = pytest.importorskip("sqlalchemy")


def test_sqlalchemy_connection(shared: Any) -> None:
    app, path, ran = shared
    engine = sa.create_engine(f"sqlite:///{path}")
    insert = sa.text("INSERT INTO orders (id, item) VALUES (:id, 'x')")
    with engine.connect() as conn:
        conn.execute(insert, {"id": 10})
        app.tasks["ship"].options(connection=conn).enqueue(10)
        conn.rollback()
    assert _job_count(app) == 0
    with engine.begin() as conn:
        conn.execute(insert, {"id": 11})
        app.tasks["ship"].options(connection=conn).enqueue(11)
    with engine.connect() as conn:  # commit-as-you-go: enqueue first, autobegin
        app.enqueue_many([app.tasks["ship"].spec(12)], connection=conn)
        conn.execute(insert, {"id": 12})
        conn.commit()
    _run_worker(app, ran, 2)
    assert sorted(ran) == [11, 12]
    engine.dispose()


def test_sqlalchemy_session(shared: Any) -> None:
    from sqlalchemy.orm import Session

    app, path, ran = shared
    engine = sa.create_engine(f"sqlite:///{path}")
    insert = sa.text("INSERT INTO orders (id, item) VALUES (:id, 'x')")
    with Session(engine) as session:
        session.execute(insert, {"id": 20})
        app.tasks["ship"].options(connection=session).enqueue(20)
        session.rollback()
    assert _job_count(app) == 0
    with Session(engine) as session, session.begin():
        app.tasks["ship"].options(connection=session).enqueue(21)
        session.execute(insert, {"id": 21})
    _run_worker(app, ran, 1)
    assert ran == [21]
    engine.dispose()
