"""Transactional enqueue on PostgreSQL: jobs commit or roll back with the caller's data.

``PostgresBroker.enqueue_in_transaction(conn, jobs)`` runs on the caller's psycopg connection,
inside the caller's transaction: rollback → no job, commit → the job runs; workers are woken
(NOTIFY) only at commit; a refused batch rolls back to its SAVEPOINT and the caller's work
survives; a long caller transaction does not stall the workers.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from conveyor import DuplicateJob, JobState
from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job

pytestmark = pytest.mark.timeout(60)


def job(job_id: str, *, key: str | None = None, queue: str = "default") -> Job:
    """A ready job as the producer builds it."""
    now = time.time()
    return Job(
        id=job_id, task="t", args=[job_id], queue=queue, run_at=now, created_at=now,
        idempotency_key=key,
    )  # fmt: skip


def claim_ids(pg: PostgresBroker, queue: str = "default") -> list[str]:
    return [lease.id for lease in pg.claim([queue], time.time(), limit=10, worker_id="w")]


def test_rollback_leaves_no_job(pg: PostgresBroker, conn: Any) -> None:
    conn.execute("INSERT INTO orders VALUES (1, 'x')")
    results = pg.enqueue_in_transaction(conn, [job("j-rollback")])
    assert [(r.id, r.duplicate) for r in results] == [("j-rollback", False)]
    conn.rollback()
    assert pg.get("j-rollback") is None
    assert claim_ids(pg) == []
    assert pg.counts().get("default", {}).get("pending", 0) == 0


def test_commit_makes_the_job_runnable_and_counted(pg: PostgresBroker, conn: Any) -> None:
    conn.execute("INSERT INTO orders VALUES (2, 'y')")
    pg.enqueue_in_transaction(conn, [job("j-commit")])
    assert claim_ids(pg) == []  # not visible before the caller commits
    conn.commit()
    assert pg.counts()["default"]["pending"] == 1
    leases = pg.claim(["default"], time.time(), limit=1, worker_id="w")
    assert [lease.id for lease in leases] == ["j-commit"]
    assert pg.complete([Ack(leases[0].id, leases[0].token)], time.time()) == [True]
    assert pg.get("j-commit").state is JobState.COMPLETED  # type: ignore[union-attr]
    events, _ = pg.events.read()
    assert [e["type"] for e in events if e["job_id"] == "j-commit"] == [
        "enqueued",
        "started",
        "completed",
    ]


def test_notify_fires_only_at_commit(pg: PostgresBroker, conn: Any, pg_server: Any) -> None:
    with psycopg.connect(pg_server.url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{pg.channel}"')
        pg.enqueue_in_transaction(conn, [job("j-notify")])
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []
        conn.commit()
        notes = list(listener.notifies(timeout=10, stop_after=1))
        assert [n.payload for n in notes] == ["default"]


def test_a_waiting_worker_wakes_at_commit_not_before(
    pg: PostgresBroker, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.broker.postgres import reads

    monkeypatch.setattr(reads, "SAFETY_POLL_S", 60.0)  # only the NOTIFY can wake it in time
    woke: list[float] = []
    assert claim_ids(pg) == []  # an empty claim: this thread now LISTENs

    def wait() -> None:
        pg.wait_for_work(["default"], 30.0)
        woke.append(time.monotonic())

    t = threading.Thread(target=wait)
    pg.enqueue_in_transaction(conn, [job("j-wake")])
    t.start()
    time.sleep(0.5)
    assert woke == []
    committed = time.monotonic()
    conn.commit()
    t.join(30)
    assert woke and woke[0] - committed < 10.0
    assert claim_ids(pg) == ["j-wake"]


def test_duplicate_id_rolls_back_to_the_savepoint_only(pg: PostgresBroker, conn: Any) -> None:
    pg.enqueue([job("taken")], time.time())
    conn.execute("INSERT INTO orders VALUES (3, 'kept')")
    with pytest.raises(DuplicateJob):
        pg.enqueue_in_transaction(conn, [job("fresh"), job("taken")])
    conn.execute("INSERT INTO orders VALUES (4, 'after')")  # the transaction is still usable
    conn.commit()
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 2
    assert pg.get("fresh") is None  # the whole batch was refused


def test_idempotency_key_in_the_callers_transaction(pg: PostgresBroker, conn: Any) -> None:
    first = pg.enqueue([job("k1", key="order-7")], time.time())
    assert not first[0].duplicate
    conn.execute("INSERT INTO orders VALUES (5, 'z')")
    again = pg.enqueue_in_transaction(conn, [job("k2", key="order-7"), job("k3", key="new")])
    assert [(r.id, r.duplicate) for r in again] == [("k1", True), ("k3", False)]
    conn.commit()
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 1
    assert sorted(claim_ids(pg)) == ["k1", "k3"]


def test_enqueue_before_the_callers_first_statement_still_rolls_back(
    pg: PostgresBroker, conn: Any
) -> None:
    pg.enqueue_in_transaction(conn, [job("j-first")])  # the connection was idle: no BEGIN yet
    conn.execute("INSERT INTO orders VALUES (6, 'w')")
    conn.rollback()
    assert pg.get("j-first") is None


def test_a_long_caller_transaction_does_not_stall_workers(pg: PostgresBroker, conn: Any) -> None:
    pg.enqueue_in_transaction(conn, [job("slow-tx")])  # held open below
    started = time.monotonic()
    pg.enqueue([job("other")], time.time())
    leases = pg.claim(["default"], time.time(), limit=5, worker_id="w")
    assert [lease.id for lease in leases] == ["other"]
    assert pg.complete([Ack(leases[0].id, leases[0].token)], time.time()) == [True]
    pg.reap_expired(time.time())
    assert time.monotonic() - started < 5.0  # no lock the open transaction holds was needed
    conn.commit()
    assert claim_ids(pg) == ["slow-tx"]
    pg.reap_expired(time.time())  # folds the caller's counts
    assert pg.counts()["default"]["active"] == 1


def test_rejects_a_non_psycopg_connection(pg: PostgresBroker) -> None:
    import sqlite3

    from conveyor import ValidationError

    with pytest.raises(ValidationError, match="connection"):
        pg.enqueue_in_transaction(sqlite3.connect(":memory:"), [job("x")])  # type: ignore[arg-type]
