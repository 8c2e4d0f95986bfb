"""Producers see Conveyor's errors, not sqlite3's, when SQLite refuses writes (issue 13, item 13).

A real file locked by another connection (``BEGIN IMMEDIATE``) is ``BrokerUnavailable``
(transient); a full database (``max_page_count`` reached: SQLITE_FULL, as on a full disk) and a
read-only one (``query_only``: SQLITE_READONLY, as for a file without write permission — the
tests run as root, where chmod does not stop writes) are ``StorageFull``. Nothing is stored.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState
from conveyor.broker.sqlite import SqliteBroker
from conveyor.errors import BrokerUnavailable, StorageFull
from conveyor.task import JobSpec


def test_locked_database_is_broker_unavailable(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    app = Conveyor(SqliteBroker(path, busy_timeout=0.2))
    app.enqueue("t")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BrokerUnavailable, match="locked"):
            app.enqueue("t", [1])
        with pytest.raises(BrokerUnavailable, match="locked"):
            app.enqueue_many([JobSpec("t", (2,), options={"priority": 1})])
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert app.search().total == 1
    app.close()


def test_full_database_is_storage_full(tmp_path: Path) -> None:
    broker = SqliteBroker(str(tmp_path / "jobs.db"))
    app = Conveyor(broker)
    app.enqueue("t")
    conn = broker._conn()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StorageFull, match="full"):
        app.enqueue("t", ["x" * 200_000])
    assert not conn.in_transaction
    conn.execute("PRAGMA max_page_count = 1073741823")
    app.enqueue("t", ["fits now"])
    assert app.search().total == 2
    app.close()


def test_read_only_database_is_storage_full(tmp_path: Path) -> None:
    broker = SqliteBroker(str(tmp_path / "jobs.db"))
    app = Conveyor(broker)
    conn = broker._conn()
    conn.execute("PRAGMA query_only = 1")
    with pytest.raises(StorageFull, match=r"read-only|readonly"):
        app.enqueue("t")
    conn.execute("PRAGMA query_only = 0")
    assert app.search().total == 0
    app.close()


def test_finished_job_is_recorded_after_a_write_lock_held_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process frozen while holding the write lock: the worker that finished a job keeps
    trying to record it while its lease is valid, not for a fixed budget (set to 1 s here, well
    under the 3 s the lock is held and the 8 s lease)."""
    import random
    import threading
    import time

    import conveyor.worker.recorder as recorder
    from conveyor.config import Settings
    from tests.worker.conftest import FAST, running, wait_until

    monkeypatch.setattr(recorder, "RETRY_FOR", 1.0)
    path = str(tmp_path / "jobs.db")
    settings = Settings(**{**FAST, "visibility_timeout": 8.0})
    app = Conveyor(SqliteBroker(path, busy_timeout=0.2), settings=settings, rng=random.Random(1))
    started, runs = threading.Event(), []

    @app.task
    def work() -> str:
        runs.append(1)
        started.set()
        time.sleep(0.2)
        return "done"

    job = work.enqueue()
    other = sqlite3.connect(path, isolation_level=None)
    with running(app, concurrency=1):
        assert started.wait(10)
        other.execute("BEGIN IMMEDIATE")  # hold the write lock while the job finishes
        time.sleep(3.0)
        other.execute("ROLLBACK")
        wait_until(lambda: job.refresh().state is JobState.COMPLETED, timeout=15)
        time.sleep(0.5)
    other.close()
    assert (job.result, job.attempts, job.lost, job.errors, len(runs)) == ("done", 1, 0, [], 1)
