"""The "done" NOTIFY is sent only while a waiter's listener exists (issue 17: drain).

PostgreSQL signals EVERY backend that LISTENs in the database at each NOTIFY, whatever the
channel, and the signalled backend runs a transaction of its own to read the notification queue.
Every completion sent ``pg_notify('conveyor.done_<schema>', queue)`` for ``JobHandle.wait``, so
in a drain with nobody waiting each completion batch woke the worker's own LISTENing connection
(its wake channel): one more commit per completion batch (0.11 commits per job where claims and
completions make 0.07) and a signal, a wake-up and a transaction of server CPU. A waiters'
listener (``waits.DoneListener``) now holds a shared advisory lock while it LISTENs; a
transaction's settle statement notifies the done channel only when its try for the exclusive
lock fails (someone listens). A listener starting while a finishing transaction holds that lock
waits for its COMMIT before it reports ready, so no waiter can miss that commit.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.core.state import JobState
from tests.support.pg_listening import until_listening

pytestmark = pytest.mark.timeout(60)


def _finish_one(pg: PostgresBroker, job_id: str) -> None:
    now = time.time()
    pg.enqueue([Job(id=job_id, task="t")], now)
    lease = pg.claim(["default"], now, worker_id="w")[0]
    assert pg.complete([Ack(lease.id, lease.token)], now) == [True]


def _received(conn: psycopg.Connection[Any], within: float) -> list[str]:
    return [n.channel for n in conn.notifies(timeout=within)]


def _take_when_no_listener(conn: psycopg.Connection[Any], key: int) -> None:
    """BEGIN and take the lock as a settle statement does, once no listener holds it (an
    earlier test's listener closes its connection within ``LISTEN_SLICE_S``)."""
    deadline = time.monotonic() + 10
    while True:
        conn.execute("BEGIN")
        got = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone()
        if got == (True,):
            return
        conn.execute("ROLLBACK")
        assert time.monotonic() < deadline, "a waiters' listener never went away"
        time.sleep(0.05)


def test_a_completion_notifies_no_one_while_no_waiter_listens(
    pg: PostgresBroker, pg_server: Any
) -> None:
    with psycopg.connect(pg_server.url, autocommit=True) as spy:
        _take_when_no_listener(spy, pg.done_key)  # no waiters' listener of an earlier test
        spy.execute("ROLLBACK")
        spy.execute(f'LISTEN "{pg.done_channel}"')  # LISTENs, but is no waiters' listener
        _finish_one(pg, "n1")
        assert _received(spy, 0.5) == [], "a done NOTIFY woke every listening backend"


def test_a_completion_still_notifies_while_a_waiter_listens(
    pg: PostgresBroker, pg_server: Any
) -> None:
    assert pg.change_cursor("default") is not None  # the waiters' listener is up
    with psycopg.connect(pg_server.url, autocommit=True) as spy:
        spy.execute(f'LISTEN "{pg.done_channel}"')
        _finish_one(pg, "n2")
        assert _received(spy, 5.0)[:1] == [pg.done_channel]


def test_a_listener_starting_during_a_finishing_commit_is_ready_only_after_it(
    pg: PostgresBroker, pg_server: Any
) -> None:
    """The interleaving the lock closes: a finishing transaction finds no listener (its try
    for the lock succeeds, so it sends nothing) and a waiter starts before that transaction
    commits. The waiter's listener must not report ready (after which the waiter reads the
    job once and then waits for a NOTIFY) until the commit, or it would read the job
    unfinished and wait for a notification that never comes."""
    with psycopg.connect(pg_server.url, autocommit=True) as finishing:
        _take_when_no_listener(finishing, pg.done_key)  # as a settle statement finding none
        out: dict[str, Any] = {}

        def wait() -> None:
            out["cursor"] = pg.change_cursor("default")
            out["at"] = time.monotonic()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        time.sleep(0.5)
        assert "at" not in out, "the listener reported ready while a finisher held the lock"
        committed = time.monotonic()
        finishing.execute("COMMIT")
    waiter.join(10)
    assert out["cursor"] is not None and out["at"] >= committed


def test_a_waiter_wakes_on_a_completion_after_the_change(
    pg: PostgresBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    pg.enqueue([Job(id="w1", task="t")], now)
    lease = pg.claim(["default"], now, worker_id="w")[0]
    until_listening(pg, monkeypatch)
    out: dict[str, Any] = {}

    def run() -> None:
        out["job"] = pg.watch("w1", "default", 20.0)
        out["at"] = time.monotonic()

    waiter = threading.Thread(target=run, daemon=True)
    waiter.start()
    time.sleep(1.5)  # past the listener's start: the wake, not its first read, returns it
    pg.complete([Ack(lease.id, lease.token)], time.time())
    done = time.monotonic()
    waiter.join(30)
    assert out["job"].state is JobState.COMPLETED
    assert out["at"] - done < 5.0, "returned by the safety poll (30 s here), not a NOTIFY"
