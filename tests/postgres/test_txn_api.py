"""Transactional enqueue on PostgreSQL through the user API (``connection=``, docs/transactions.md).

``task.options(connection=conn).enqueue(…)`` and ``app.enqueue_many(…, connection=conn)`` with a
psycopg connection, a SQLAlchemy ``Connection`` and a SQLAlchemy ``Session`` (the
``postgresql+psycopg://`` driver): rollback → no job; commit → a real worker runs it and its
result is waited for; a taken id (``DuplicateJob``) leaves the caller's transaction alive; an
idempotency key returns the existing job. Django is in tests/contrib/test_django_txn.py.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor, DuplicateJob, JobState
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.config import Settings
from tests.worker.conftest import FAST, running

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def app(pg: PostgresBroker) -> Iterator[Conveyor]:
    """An app on the flushed broker with a task that reads the order committed with its job."""
    app = Conveyor(pg, settings=Settings(**FAST), rng=random.Random(3))  # type: ignore[arg-type]
    url = pg.url

    @app.task(name="ship")
    def ship(order_id: int) -> str:
        with psycopg.connect(url) as c:
            row = c.execute("SELECT note FROM orders WHERE id = %s", (order_id,)).fetchone()
        return f"shipped {row[0] if row else None}"

    yield app
    app.close()


def jobs(app: Conveyor) -> int:
    return sum(sum(states.values()) for states in app.broker.counts().values())


def test_psycopg_rollback_leaves_no_job_commit_runs_it(app: Conveyor, conn: Any) -> None:
    ship = app.tasks["ship"]
    conn.execute("INSERT INTO orders VALUES (1, 'ghost')")
    ghost = ship.options(connection=conn).enqueue(1)
    conn.rollback()
    assert app.broker.get(ghost.id) is None and jobs(app) == 0
    with conn.transaction():
        conn.execute("INSERT INTO orders VALUES (2, 'ada')")
        one = ship.options(connection=conn).enqueue(2)
        many = app.enqueue_many([ship.spec(2), ship.spec(2)], connection=conn)
        assert app.broker.get(one.id) is None, "invisible before the commit"
    conn.commit()
    with running(app):
        assert one.wait(timeout=30) == "shipped ada"
        assert [h.wait(timeout=30) for h in many] == ["shipped ada"] * 2


def test_a_taken_id_keeps_the_callers_transaction_alive(app: Conveyor, conn: Any) -> None:
    ship = app.tasks["ship"]
    app.enqueue("ship", [3], job_id="order-3")
    conn.execute("INSERT INTO orders VALUES (3, 'kept')")
    with pytest.raises(DuplicateJob):
        ship.options(connection=conn, job_id="order-3").enqueue(3)
    other = ship.options(connection=conn).enqueue(3)  # the transaction goes on
    conn.commit()
    with psycopg.connect(app.broker.url) as c:  # type: ignore[attr-defined]
        assert c.execute("SELECT note FROM orders WHERE id = 3").fetchone() == ("kept",)
    assert app.broker.get(other.id) is not None


def test_an_idempotency_key_returns_the_job_of_the_same_transaction(
    app: Conveyor, conn: Any
) -> None:
    ship = app.tasks["ship"]
    first = ship.options(connection=conn, idempotency_key="k").enqueue(4)
    again = ship.options(connection=conn, idempotency_key="k").enqueue(4)
    assert again.duplicate and again.id == first.id
    conn.commit()
    assert jobs(app) == 1


def test_the_stored_envelope_is_the_producers(
    app: Conveyor, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The producer encodes once; the broker stores those bytes (no second encoding)."""
    producer = app.runtime.producer
    encoded: list[bytes] = []
    real = producer.encode

    def encode(*args: Any) -> Any:
        out = real(*args)
        encoded.extend(out[0])
        return out

    monkeypatch.setattr(producer, "encode", encode)
    handle = app.tasks["ship"].options(connection=conn).enqueue(5)
    conn.commit()
    with psycopg.connect(app.broker.url) as c:  # type: ignore[attr-defined]
        row = c.execute("SELECT payload FROM conveyor.jobs WHERE id = %s", (handle.id,)).fetchone()
    assert row is not None and [bytes(row[0])] == encoded


@pytest.mark.parametrize("form", ["connection", "session"])
def test_sqlalchemy_connection_and_session(app: Conveyor, form: str, pg_server: Any) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    ship = app.tasks["ship"]
    engine = sqlalchemy.create_engine(
        pg_server.url.replace("postgresql://", "postgresql+psycopg://")
    )
    try:

        def run(order: int, note: str, rollback: bool) -> Any:
            if form == "connection":
                with engine.connect() as sa:
                    sa.execute(text("INSERT INTO orders VALUES (:i, :n)"), {"i": order, "n": note})
                    handle = ship.options(connection=sa).enqueue(order)
                    sa.rollback() if rollback else sa.commit()
                    return handle
            with Session(engine) as session:
                session.execute(text("INSERT INTO orders VALUES (:i, :n)"), {"i": order, "n": note})
                handle = ship.options(connection=session).enqueue(order)
                session.rollback() if rollback else session.commit()
                return handle

        base = 10 if form == "connection" else 20
        ghost = run(base, "ghost", rollback=True)
        assert app.broker.get(ghost.id) is None and jobs(app) == 0
        kept = run(base + 1, form, rollback=False)
        assert app.broker.get(kept.id).state is JobState.PENDING  # type: ignore[union-attr]
        with running(app):
            assert kept.wait(timeout=30) == f"shipped {form}"
    finally:
        engine.dispose()


def test_another_drivers_connection_is_refused(app: Conveyor) -> None:
    import sqlite3

    from conveyor.errors import ValidationError

    other = sqlite3.connect(":memory:")
    try:
        with pytest.raises(ValidationError, match=r"connection.*psycopg"):
            app.tasks["ship"].options(connection=other).enqueue(6)
    finally:
        other.close()
    assert jobs(app) == 0
