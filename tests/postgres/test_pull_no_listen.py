"""A pull consumer (``app.dequeue``, no worker) holds no wake-up connection (issue 17).

The wake-up connection of a claiming thread LISTENs so that ``wait_for_work`` can block on it;
``app.dequeue`` claims but never waits. It used to be opened at a thread's first claim and kept:
a server connection for nothing, and a backend PostgreSQL signals (one transaction) at every
NOTIFY while it LISTENs (an empty claim leaves it LISTENing). It is now opened by the first
``wait_for_work`` only; tests/postgres/test_wake_busy.py keeps the waits' guarantees.
"""

from __future__ import annotations

import random
import time
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.core.state import JobState

pytestmark = pytest.mark.timeout(60)

#: the backends whose last statement was a wake-up connection's: LISTEN, UNLISTEN, or the look
#: of a wait that LISTENs again (``reads._RELISTEN``)
_WAKE_BACKENDS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid() AND (query ILIKE '%%LISTEN %%' OR query ILIKE '%%UNLISTEN%%')"
)


def _wake_backends(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        return int(c.execute(_WAKE_BACKENDS).fetchone()[0])  # type: ignore[index]


def test_dequeue_calls_open_no_wake_up_connection(pg: PostgresBroker, pg_server: Any) -> None:
    before = _wake_backends(pg_server.url)
    app = Conveyor(pg, rng=random.Random(3))  # type: ignore[arg-type]
    for i in range(3):
        pg.enqueue([Job(id=f"j{i}", task="t")], time.time())
    got = [app.dequeue("default", visibility_timeout=30) for _ in range(6)]  # 3 jobs, 3 empty
    assert [d is not None for d in got] == [True] * 3 + [False] * 3
    assert _wake_backends(pg_server.url) == before, "a LISTENing backend per pull consumer"
    assert pg._listeners == [], "app.dequeue opened a wake-up connection"


def test_empty_dequeues_leave_no_listening_backend(pg: PostgresBroker, pg_server: Any) -> None:
    """Only empty claims: the connection used to stay LISTENing, signalled at every NOTIFY."""
    before = _wake_backends(pg_server.url)
    app = Conveyor(pg, rng=random.Random(4))  # type: ignore[arg-type]
    assert [app.dequeue("default", visibility_timeout=30) for _ in range(5)] == [None] * 5
    assert _wake_backends(pg_server.url) == before, "a LISTENing backend per pull consumer"


def test_the_first_wait_opens_it(pg: PostgresBroker, pg_server: Any) -> None:
    """The positive control of the count above: a wait does open (and LISTEN on) one."""
    before = _wake_backends(pg_server.url)
    pg.wait_for_work(["default"], 0.05)
    assert len(pg._listeners) == 1
    assert _wake_backends(pg_server.url) == before + 1


def _timed_wait(pg: PostgresBroker, timeout: float = 10.0) -> float:
    began = time.monotonic()
    pg.wait_for_work(["default"], timeout)
    return time.monotonic() - began


#: well under the safety poll (1 s), which would otherwise hide a lost wake-up
PROMPT_S = 0.5


def test_a_job_enqueued_between_the_first_claim_and_the_first_wait_is_not_missed(
    pg: PostgresBroker,
) -> None:
    """No connection LISTENed when it was enqueued: the first wait's look (after its LISTEN)
    sees it, as the wait after a full claim does (tests/postgres/test_wake_busy.py)."""
    assert pg.claim(["default"], time.time(), limit=4, worker_id="w") == []
    pg.enqueue([Job(id="between", task="t")], time.time())
    assert _timed_wait(pg) < PROMPT_S


def test_a_delayed_job_enqueued_before_the_first_wait_ends_it_at_once(pg: PostgresBroker) -> None:
    """Due before what the empty claim reported (nothing): the worker must claim again and
    learn the new due time rather than sleep its whole poll interval."""
    now = time.time()
    assert pg.claim(["default"], now, limit=4, worker_id="w") == []
    pg.enqueue([Job(id="later", task="t", run_at=now + 3, state=JobState.SCHEDULED)], now)
    assert _timed_wait(pg) < PROMPT_S


def test_a_delayed_job_the_claim_reported_does_not_end_the_first_wait(pg: PostgresBroker) -> None:
    now = time.time()
    pg.enqueue([Job(id="later", task="t", run_at=now + 30, state=JobState.SCHEDULED)], now)
    assert pg.claim(["default"], now, limit=4, worker_id="w") == []  # reports next_due
    assert _timed_wait(pg, 1.5) >= 1.4, "a known delayed job ended the first wait early"
