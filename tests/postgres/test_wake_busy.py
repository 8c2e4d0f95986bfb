"""A busy worker's wake-up connection does not LISTEN (issue 17: server CPU per enqueue).

PostgreSQL signals EVERY backend that LISTENs in the database at each NOTIFY, and each
signalled backend runs a transaction to read the notification queue. Every enqueue sends the
wake NOTIFY, so each busy worker's LISTENing connection (one per claiming thread) cost the
server a transaction per enqueue, for nothing: a worker with no free slot does not wait for
work. A claim that fills every slot it was asked for now UNLISTENs that connection (the
worker's next step is another claim, not a wait), and the next ``wait_for_work`` LISTENs again
before it blocks, then looks once for what it could have missed meanwhile: a ready job, or a
delayed one due before what the last claim reported. So no wake-up is lost: a job committed
before the LISTEN is seen by that look, one committed after it sends a NOTIFY this connection
receives (the same interleavings as tests/postgres/test_done_wakeups.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.core.state import JobState

pytestmark = pytest.mark.timeout(60)
#: well under the safety poll (1 s), which would otherwise hide a lost wake-up
PROMPT_S = 0.5


def _busy(pg: PostgresBroker, job_id: str = "busy") -> None:
    """Enqueue one job and claim it with ``limit=1``: the claim fills the worker's slot."""
    now = time.time()
    pg.enqueue([Job(id=job_id, task="t")], now)
    assert len(pg.claim(["default"], now, limit=1, worker_id="w")) == 1


def _has_waited(pg: PostgresBroker) -> None:
    """A worker's thread that has waited for work once: it holds a wake-up connection (only a
    wait opens one, tests/postgres/test_pull_no_listen.py)."""
    pg.wait_for_work(["default"], 0.01)
    assert pg._local.listener is not None


def _timed_wait(pg: PostgresBroker, timeout: float = 10.0) -> float:
    began = time.monotonic()
    pg.wait_for_work(["default"], timeout)
    return time.monotonic() - began


def test_a_busy_workers_connection_is_not_signalled_by_an_enqueue(pg: PostgresBroker) -> None:
    now = time.time()
    pg.enqueue([Job(id="busy", task="t")], now)  # before the LISTEN: its NOTIFY is not received
    _has_waited(pg)  # the look finds the job: the wait ends at once, LISTENing
    assert len(pg.claim(["default"], now, limit=1, worker_id="w")) == 1  # fills the slot
    listener = pg._local.listener  # this thread's wake-up connection
    pg.enqueue([Job(id="more", task="t")], time.time())  # its NOTIFY
    got = [n.payload for n in listener.notifies(timeout=1.0)]
    assert got == [], "the enqueue's NOTIFY reached (signalled) a busy worker's connection"


def test_an_idle_workers_connection_still_listens_after_a_short_claim(
    pg: PostgresBroker,
) -> None:
    _has_waited(pg)
    now = time.time()
    pg.enqueue([Job(id="one", task="t")], now)
    assert len(pg.claim(["default"], now, limit=4, worker_id="w")) == 1  # slots left: idle
    listener = pg._local.listener
    pg.enqueue([Job(id="two", task="t")], time.time())
    assert [n.payload for n in listener.notifies(timeout=5.0)][:1] == ["default"]


def test_a_job_enqueued_while_busy_ends_the_next_wait_at_once(pg: PostgresBroker) -> None:
    _busy(pg)
    pg.enqueue([Job(id="missed", task="t")], time.time())  # no NOTIFY reaches this thread
    assert _timed_wait(pg) < PROMPT_S, "the job enqueued while busy waited for the safety poll"


def test_a_delayed_job_enqueued_while_busy_ends_the_next_wait_at_once(
    pg: PostgresBroker,
) -> None:
    """It moves the next due time earlier: the NOTIFY would have made the worker claim again
    (its claim reports the new ``next_due``), so the look after the LISTEN does it."""
    _busy(pg)
    now = time.time()
    assert pg.claim(["default"], now, limit=1, worker_id="w") == []  # a slot freed: empty claim
    pg.enqueue([Job(id="later", task="t", run_at=now + 3, state=JobState.SCHEDULED)], now)
    assert _timed_wait(pg) < PROMPT_S


def test_a_busy_worker_that_comes_to_wait_is_woken_by_the_next_enqueue(
    pg: PostgresBroker,
) -> None:
    _busy(pg)
    assert pg.claim(["default"], time.time(), limit=1, worker_id="w") == []  # idle again
    out: dict[str, float] = {}

    def wait() -> None:
        out["waited"] = _timed_wait(pg, 20.0)
        out["at"] = time.monotonic()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(1.5)  # past the waiter's LISTEN and its first safety poll
    assert "at" not in out
    sent = time.monotonic()
    pg.enqueue([Job(id="late", task="t")], time.time())
    waiter.join(20)
    assert out["at"] - sent < PROMPT_S, "the wait did not wake on the NOTIFY"


def test_a_job_committing_while_the_wait_listens_again_is_not_lost(
    pg: PostgresBroker, pg_server: Any
) -> None:
    """The interleaving that matters: a job inserted before the wait LISTENs again but
    committed after it. The wait's look (after its LISTEN) cannot see it; its COMMIT comes
    after the LISTEN, so its NOTIFY reaches the connection."""
    _busy(pg)
    assert pg.claim(["default"], time.time(), limit=1, worker_id="w") == []
    with psycopg.connect(pg_server.url) as app:
        pg.enqueue_in_transaction(app, [Job(id="racing", task="t")], time.time())
        out: dict[str, float] = {}

        def wait() -> None:
            pg.wait_for_work(["default"], 20.0)
            out["at"] = time.monotonic()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        time.sleep(1.5)  # the wait listens again and looks: the job is not committed yet
        assert "at" not in out
        committed = time.monotonic()
        app.commit()
    waiter.join(20)
    assert out["at"] - committed < PROMPT_S
