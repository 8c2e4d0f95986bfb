"""A row the broker refuses (a poison row) leaves the outbox relay's loop: it moves to the
``<table>_failed`` table with the error, is counted and logged, and the rows around it go on
(real redis-server, real SQLite file)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from conveyor import Conveyor
from conveyor.outbox import Outbox, ddl
from conveyor.relay import Relay

DEADLINE = 60.0


@pytest.fixture
def rapp(redis_server: Any) -> Iterator[Conveyor]:
    """An app on the flushed session redis-server with one task."""
    app = Conveyor(redis_server.url)
    app.broker.flush_all()  # type: ignore[attr-defined]
    app.task(name="ship")(lambda order_id: None)
    yield app
    app.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The application's SQLite file with the outbox table."""
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        for statement in ddl():
            conn.execute(statement)
    return path


def _poison(conn: sqlite3.Connection, rapp: Conveyor) -> str:
    """Three committed rows; the middle one names a queue Redis refuses (a hand-made row, or
    one written by a producer whose rules differ from the broker's)."""
    ship = rapp.tasks["ship"]
    ship.options(connection=conn).enqueue(1)
    bad = ship.options(connection=conn).enqueue(2)
    ship.options(connection=conn).enqueue(3)
    conn.commit()
    (payload,) = conn.execute(
        "SELECT payload FROM conveyor_outbox WHERE id = ?", (bad.id,)
    ).fetchone()
    envelope = orjson.loads(payload)
    envelope["queue"] = "no spaces allowed"
    conn.execute(
        "UPDATE conveyor_outbox SET payload = ? WHERE id = ?",
        (orjson.dumps(envelope).decode(), bad.id),
    )
    conn.commit()
    return bad.id


def test_a_refused_row_moves_to_the_failed_table_and_the_others_go_on(
    rapp: Conveyor, db: Path
) -> None:
    outbox = Outbox(rapp, f"sqlite:///{db}")
    conn = sqlite3.connect(db)
    bad = _poison(conn, rapp)
    relay = Relay(outbox)
    assert relay.relay_once() == 3  # it used to raise ValidationError here, every time
    assert relay.relay_once() == 0
    assert relay.failed == 1 and relay.relayed == 3
    counts = rapp.broker.counts()
    assert sum(sum(c.values()) for c in counts.values()) == 2
    assert conn.execute("SELECT count(*) FROM conveyor_outbox").fetchone()[0] == 0
    row = conn.execute(
        "SELECT id, payload, error, failed_at FROM conveyor_outbox_failed"
    ).fetchall()
    assert len(row) == 1 and row[0][0] == bad
    assert "no spaces allowed" in row[0][1] and row[0][2].startswith("ValidationError: queue")
    assert row[0][3] > 0
    # moved back by hand (still refused) without deleting its failed copy: moved again, once
    conn.execute(
        "INSERT INTO conveyor_outbox SELECT id, created_at, payload FROM conveyor_outbox_failed"
    )
    conn.commit()
    assert relay.relay_once() == 1 and relay.failed == 2
    assert conn.execute("SELECT count(*) FROM conveyor_outbox_failed").fetchone()[0] == 1
    relay.close()


def test_a_running_relay_does_not_loop_on_a_refused_row(rapp: Conveyor, db: Path) -> None:
    outbox = Outbox(rapp, f"sqlite:///{db}", interval=0.02)
    conn = sqlite3.connect(db)
    _poison(conn, rapp)
    relay = Relay(outbox)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while conn.execute("SELECT count(*) FROM conveyor_outbox").fetchone()[0]:
        assert time.monotonic() < deadline, "the relay is stuck on the refused row"
        time.sleep(0.02)
    rapp.tasks["ship"].options(connection=conn).enqueue(4)  # later rows still flow
    conn.commit()
    while sum(sum(c.values()) for c in rapp.broker.counts().values()) < 3:
        assert time.monotonic() < deadline, "a later row was not relayed"
        time.sleep(0.02)
    relay.stop()
    thread.join(DEADLINE)
    assert relay.failed == 1


def test_a_refused_row_on_a_postgresql_outbox(rapp: Conveyor, pg_server: Any) -> None:
    """The same with the outbox in PostgreSQL (psycopg, ``%s`` placeholders, transactional DDL)."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_server.url, autocommit=True) as setup:
        setup.execute("DROP TABLE IF EXISTS conveyor_outbox, conveyor_outbox_failed")
        for statement in ddl():
            setup.execute(statement)
    outbox = Outbox(rapp, pg_server.url)
    conn = psycopg.connect(pg_server.url)
    ship = rapp.tasks["ship"]
    good = ship.options(connection=conn).enqueue(1)
    bad = ship.options(connection=conn).enqueue(2)
    conn.commit()
    envelope = orjson.loads(
        conn.execute("SELECT payload FROM conveyor_outbox WHERE id = %s", (bad.id,)).fetchone()[0]
    )
    envelope["queue"] = "no spaces allowed"
    conn.execute(
        "UPDATE conveyor_outbox SET payload = %s WHERE id = %s",
        (orjson.dumps(envelope).decode(), bad.id),
    )
    conn.commit()
    relay = Relay(outbox)
    assert relay.relay_once() == 2 and relay.failed == 1
    assert rapp.get_job(good.id) is not None
    failed = conn.execute("SELECT id, error FROM conveyor_outbox_failed").fetchall()
    assert [row[0] for row in failed] == [bad.id] and "queue" in failed[0][1]
    assert conn.execute("SELECT count(*) FROM conveyor_outbox").fetchone()[0] == 0
    conn.close()
    relay.close()


def _rewrite(conn: Any, p: str, row_id: str, **fields: Any) -> None:
    """Change fields of a row's envelope (a hand-edited row, or another producer's)."""
    (payload,) = conn.execute(
        f"SELECT payload FROM conveyor_outbox WHERE id = {p}", (row_id,)
    ).fetchone()
    envelope = orjson.loads(payload) | fields
    conn.execute(
        f"UPDATE conveyor_outbox SET payload = {p} WHERE id = {p}",
        (orjson.dumps(envelope).decode(), row_id),
    )
    conn.commit()


def test_a_refused_row_whose_payload_names_another_id_is_kept(rapp: Conveyor, db: Path) -> None:
    """The refusal was keyed by the payload's job id, the move by the row id: a refused row
    whose envelope carries another id was deleted from the outbox and never reached
    ``<table>_failed`` (lost)."""
    outbox = Outbox(rapp, f"sqlite:///{db}")
    conn = sqlite3.connect(db)
    ship = rapp.tasks["ship"]
    good = ship.options(connection=conn).enqueue(1)
    bad = ship.options(connection=conn).enqueue(2)
    conn.commit()
    _rewrite(conn, "?", bad.id, id="copied-by-hand", queue="no spaces allowed")
    relay = Relay(outbox)
    assert relay.relay_once() == 2 and relay.failed == 1
    assert rapp.get_job(good.id) is not None
    failed = conn.execute("SELECT id, payload, error FROM conveyor_outbox_failed").fetchall()
    assert [row[0] for row in failed] == [bad.id], "the refused row was lost"
    assert "copied-by-hand" in failed[0][1] and failed[0][2].startswith("ValidationError")
    assert conn.execute("SELECT count(*) FROM conveyor_outbox").fetchone()[0] == 0
    relay.close()


def test_the_same_on_a_postgresql_outbox(rapp: Conveyor, pg_server: Any) -> None:
    """On PostgreSQL the lost row's batch also sent ``IN ()``: a syntax error every time."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_server.url, autocommit=True) as setup:
        setup.execute("DROP TABLE IF EXISTS conveyor_outbox, conveyor_outbox_failed")
        for statement in ddl():
            setup.execute(statement)
    relay = Relay(Outbox(rapp, pg_server.url))
    conn = psycopg.connect(pg_server.url)
    bad = rapp.tasks["ship"].options(connection=conn).enqueue(2)
    conn.commit()
    _rewrite(conn, "%s", bad.id, id="copied-by-hand", queue="no spaces allowed")
    assert relay.relay_once() == 1 and relay.failed == 1
    failed = conn.execute("SELECT id FROM conveyor_outbox_failed").fetchall()
    assert [row[0] for row in failed] == [bad.id]
    conn.close()
    relay.close()


def test_a_batch_that_fails_before_its_delete_leaves_no_failed_copy(
    rapp: Conveyor, db: Path
) -> None:
    """The move to ``<table>_failed`` and the outbox delete commit together: a batch that
    dies after the insert (here the delete is refused by a trigger, as a lost connection
    would cut it) leaves the refused row in the outbox only; the next batch moves it once."""
    outbox = Outbox(rapp, f"sqlite:///{db}")
    conn = sqlite3.connect(db)
    bad = _poison(conn, rapp)
    conn.execute(
        "CREATE TRIGGER crash BEFORE DELETE ON conveyor_outbox BEGIN SELECT RAISE(ABORT, 'x'); END"
    )
    conn.commit()
    relay = Relay(outbox)
    with pytest.raises(sqlite3.DatabaseError):
        relay.relay_once()
    assert conn.execute("SELECT count(*) FROM conveyor_outbox").fetchall() == [(3,)]
    assert conn.execute("SELECT count(*) FROM conveyor_outbox_failed").fetchall() == [(0,)]
    conn.execute("DROP TRIGGER crash")  # (fetchall: no statement left open on this table)
    conn.commit()
    assert relay.relay_once() == 3 and relay.failed == 1 and relay.duplicates == 2
    failed = conn.execute("SELECT id FROM conveyor_outbox_failed").fetchall()
    assert failed == [(bad,)]
    assert sum(sum(c.values()) for c in rapp.broker.counts().values()) == 2
    relay.close()


def test_a_failed_batch_does_not_keep_the_outbox_locked(
    rapp: Conveyor, db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed batch's transaction is rolled back at once. It used to stay open while the
    failure was handled (its cursor lived in the traceback, so closing the SQLite connection
    was deferred): during the relay's backoff the application could not write an outbox row
    ("database is locked")."""
    outbox = Outbox(rapp, f"sqlite:///{db}", interval=4.0)  # backoff after a failure: 5 s
    conn = sqlite3.connect(db, timeout=0.5)
    _poison(conn, rapp)
    conn.execute(
        "CREATE TRIGGER crash BEFORE DELETE ON conveyor_outbox BEGIN SELECT RAISE(ABORT, 'x'); END"
    )
    conn.commit()
    relay = Relay(outbox)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while not any("batch failed" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the batch did not fail"
        time.sleep(0.01)
    rapp.tasks["ship"].options(connection=conn).enqueue(9)  # within the backoff
    conn.commit()
    relay.stop()
    thread.join(DEADLINE)
    assert conn.execute("SELECT count(*) FROM conveyor_outbox").fetchall() == [(4,)]
