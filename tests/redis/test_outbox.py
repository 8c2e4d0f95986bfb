"""The transactional outbox for Redis: rows written in the caller's transaction (sqlite3,
SQLAlchemy Connection / Session on a real SQLite file), relayed to the real redis-server exactly
once, in-process, inside a worker, and as ``conveyor relay`` killed with kill -9 mid-batch.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.errors import DuplicateJob, ValidationError
from conveyor.outbox import Outbox, ddl
from conveyor.relay import Relay

DEADLINE = 60.0


@pytest.fixture
def rapp(redis_server: Any) -> Iterator[Conveyor]:
    """An app on the flushed session redis-server with one task."""
    app = Conveyor(redis_server.url)
    app.broker.flush_all()  # type: ignore[attr-defined]
    ran: list[int] = []
    app.task(name="ship")(lambda order_id: ran.append(order_id))
    app.ran = ran  # type: ignore[attr-defined]
    yield app
    app.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The application's SQLite file with its ``orders`` table and the outbox table."""
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        for statement in ddl():
            conn.execute(statement)
    return path


def _jobs(app: Conveyor) -> int:
    return sum(sum(states.values()) for states in app.broker.counts().values())


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM conveyor_outbox").fetchone()[0])


def test_plain_redis_refuses_connection_naming_the_outbox(rapp: Conveyor, db: Path) -> None:
    conn = sqlite3.connect(db)
    with pytest.raises(ValidationError, match=r"^connection: .*outbox"):
        rapp.tasks["ship"].options(connection=conn).enqueue(1)
    assert _rows(db) == 0


def test_rollback_no_row_commit_one_job_and_a_repush_is_harmless(rapp: Conveyor, db: Path) -> None:
    outbox = Outbox(rapp, f"sqlite:///{db}")
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO orders VALUES (1)")
    rapp.tasks["ship"].options(connection=conn).enqueue(1)
    conn.rollback()
    assert _rows(db) == 0
    conn.execute("INSERT INTO orders VALUES (2)")
    handle = rapp.tasks["ship"].options(connection=conn).enqueue(2)
    rapp.enqueue_many([rapp.tasks["ship"].spec(3)], connection=conn)
    with pytest.raises(DuplicateJob):  # savepoint: the caller's rows survive
        rapp.tasks["ship"].options(connection=conn, job_id=handle.id).enqueue(9)
    conn.commit()
    assert _rows(db) == 2 and _jobs(rapp) == 0
    relay = Relay(outbox)
    assert relay.relay_once() == 2 and relay.relay_once() == 0
    assert _rows(db) == 0 and _jobs(rapp) == 2
    job = rapp.get_job(handle.id)
    assert job.state is JobState.PENDING and job.args == [2]
    # a relay that died after pushing and before deleting: the row comes back, no second job
    conn.execute("INSERT INTO orders VALUES (4)")
    again = rapp.tasks["ship"].options(connection=conn).enqueue(4)
    conn.commit()
    row = conn.execute("SELECT id, created_at, payload FROM conveyor_outbox").fetchone()
    assert relay.relay_once() == 1
    conn.execute("INSERT INTO conveyor_outbox VALUES (?, ?, ?)", row)  # the same row again
    conn.commit()
    assert relay.relay_once() == 1 and relay.duplicates == 1
    assert _jobs(rapp) == 3 and rapp.get_job(again.id).args == [4]
    relay.close()


sa = pytest.importorskip("sqlalchemy")


def test_sqlalchemy_connection_and_session(rapp: Conveyor, db: Path) -> None:
    from sqlalchemy.orm import Session

    outbox = Outbox(rapp, f"sqlite:///{db}")
    engine = sa.create_engine(f"sqlite:///{db}")
    insert = sa.text("INSERT INTO orders VALUES (:id)")
    with engine.connect() as conn:
        conn.execute(insert, {"id": 1})
        rapp.tasks["ship"].options(connection=conn).enqueue(1)
        conn.rollback()
    with Session(engine) as session:
        rapp.tasks["ship"].options(connection=session).enqueue(2)
        session.rollback()
    assert _rows(db) == 0
    with engine.begin() as conn:
        rapp.tasks["ship"].options(connection=conn).enqueue(3)
    with Session(engine) as session, session.begin():
        session.execute(insert, {"id": 4})
        rapp.enqueue_many([rapp.tasks["ship"].spec(4)], connection=session)
    assert _rows(db) == 2
    Relay(outbox).relay_once()
    assert _jobs(rapp) == 2 and _rows(db) == 0
    engine.dispose()


def test_relay_inside_the_worker(rapp: Conveyor, db: Path) -> None:
    Outbox(rapp, f"sqlite:///{db}", relay_in_worker=True, interval=0.05)
    worker = rapp.worker(handle_signals=False, heartbeat=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    conn = sqlite3.connect(db)
    rapp.tasks["ship"].options(connection=conn).enqueue(7)
    conn.commit()
    deadline = time.monotonic() + DEADLINE
    while rapp.ran != [7] and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.02)
    worker.stop()
    thread.join(DEADLINE)
    assert rapp.ran == [7]  # type: ignore[attr-defined]
    assert _rows(db) == 0


APP_MODULE = """
import os
from conveyor import Conveyor
from conveyor.outbox import Outbox

app = Conveyor(os.environ["RELAY_TEST_REDIS"])
outbox = Outbox(app, os.environ["RELAY_TEST_DB"], batch=50, interval=0.05)
"""


def _relay(tmp_path: Path, redis_url: str, db: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "RELAY_TEST_REDIS": redis_url, "RELAY_TEST_DB": f"sqlite:///{db}"}
    return subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "relay", "relay_app:app", *extra],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(cond: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_relay_killed_with_kill_9_mid_batch_loses_and_duplicates_nothing(
    rapp: Conveyor, db: Path, tmp_path: Path, redis_server: Any
) -> None:
    (tmp_path / "relay_app.py").write_text(APP_MODULE)
    Outbox(rapp, f"sqlite:///{db}")
    n = 3000
    conn = sqlite3.connect(db)
    ids = [
        h.id
        for h in rapp.enqueue_many([rapp.tasks["ship"].spec(i) for i in range(n)], connection=conn)
    ]
    conn.commit()
    assert _rows(db) == n and _jobs(rapp) == 0

    # 1. the relay pushes its first batch, then waits for the write lock we hold: kill -9 there
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    proc = _relay(tmp_path, redis_server.url, db)
    _wait(lambda: _jobs(rapp) == 50, "the first batch in Redis")
    assert _rows(db) == n  # pushed, not deleted: the crash window
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(DEADLINE)
    lock.execute("ROLLBACK")
    lock.close()

    # 2. a relay running freely, killed at an arbitrary moment part-way through
    proc = _relay(tmp_path, redis_server.url, db)
    _wait(lambda: _jobs(rapp) >= 1000, "a third of the jobs in Redis")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(DEADLINE)
    assert 0 < _rows(db) < n

    # 3. restarted: it empties the outbox
    proc = _relay(tmp_path, redis_server.url, db, "--once")
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err
    assert re.search(r"relayed \d+ row\(s\)", out)
    assert _rows(db) == 0
    assert _jobs(rapp) == n  # 0 duplicates
    found = {rapp.get_job(i).args[0] for i in ids}
    assert found == set(range(n))  # 0 lost: every row became its own job


def test_bad_table_batch_and_url_are_refused_by_name(rapp: Conveyor, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"^table: "):
        Outbox(rapp, "sqlite:///x.db", table="orders; DROP TABLE orders")
    # PostgreSQL cuts names at 63 bytes: "<63 chars>_failed" would name the outbox itself
    Outbox(rapp, "sqlite:///x.db", table="s." + "o" * 55)
    with pytest.raises(ValidationError, match=r"^table: .*at most 55"):
        Outbox(rapp, "sqlite:///x.db", table="o" * 56)
    with pytest.raises(ValidationError, match=r"^url: "):
        Relay(Outbox(rapp))  # no database to read
    with pytest.raises(ValidationError, match=r"^batch: "):
        Relay(Outbox(rapp, f"sqlite:///{tmp_path / 'o.db'}"), batch=-1)
    with pytest.raises(ValidationError, match=r"^url: "):
        Relay(Outbox(rapp, "mysql://db/shop")).relay_once()


def test_create_table_and_sqlalchemy_table_make_a_working_outbox(
    rapp: Conveyor, tmp_path: Path
) -> None:
    from conveyor.outbox import sqlalchemy_table

    first = tmp_path / "a.db"
    outbox = Outbox(rapp, f"sqlite:///{first}")
    conn = sqlite3.connect(first)
    outbox.create_table(conn)
    outbox.create_table(conn)  # idempotent
    conn.commit()
    rapp.tasks["ship"].options(connection=conn).enqueue(1)
    conn.commit()
    second = tmp_path / "b.db"
    metadata = sa.MetaData()
    sqlalchemy_table(metadata)
    engine = sa.create_engine(f"sqlite:///{second}")
    metadata.create_all(engine)
    other = Outbox(rapp, f"sqlite:///{second}")
    with engine.begin() as sconn:
        rapp.tasks["ship"].options(connection=sconn).enqueue(2)
    assert Relay(outbox).relay_once() == 1 and Relay(other).relay_once() == 1
    assert _jobs(rapp) == 2
    engine.dispose()
