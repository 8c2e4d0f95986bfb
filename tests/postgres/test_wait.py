"""Waiting on one job on PostgreSQL (``JobHandle.wait``): a LISTEN wake-up, not a poll.

A finished job (completed, dead-lettered, cancelled, deleted) sends ``pg_notify`` on the
schema's "done" channel at commit; one listener per process wakes the waiters of that queue.
The waiter returns within a few ms of the commit, reads the job a handful of times however long
it waits, and still returns (by the safety re-read) when the listener connection is killed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.core.state import JobState
from tests.support.pg_listening import until_listening

pytestmark = pytest.mark.timeout(60)


def job(job_id: str, queue: str = "default", delay: float = 0.0) -> Job:
    """A job as the producer builds it (delayed when ``delay`` > 0)."""
    now = time.time()
    state = JobState.SCHEDULED if delay else JobState.PENDING
    return Job(id=job_id, task="t", queue=queue, run_at=now + delay, created_at=now, state=state)


def counting_gets(pg: PostgresBroker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each ``get`` the waiter makes (the real read still runs)."""
    calls: list[str] = []
    real = pg.get

    def get(job_id: str) -> Any:
        calls.append(job_id)
        return real(job_id)

    monkeypatch.setattr(pg, "get", get)
    return calls


def watch_in_thread(pg: PostgresBroker, job_id: str, timeout: float = 20.0) -> dict[str, Any]:
    """Start ``watch`` in a thread; the dict gets the job and the monotonic return time."""
    out: dict[str, Any] = {}

    def run() -> None:
        out["job"] = pg.watch(job_id, "default", timeout)
        out["at"] = time.monotonic()

    out["thread"] = threading.Thread(target=run, daemon=True)
    out["thread"].start()
    return out


def finish_after(pause: float, action: Callable[[], Any], out: dict[str, Any]) -> None:
    """Sleep, run ``action`` (a committed transition), note when it returned, join the waiter."""
    time.sleep(pause)
    action()
    done = time.monotonic()
    out["thread"].join(30)
    assert not out["thread"].is_alive()
    out["latency"] = out["at"] - done


def test_a_waiter_wakes_within_ms_of_the_commit_without_polling(
    pg: PostgresBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.enqueue([job("w1")], time.time())
    lease = pg.claim(["default"], time.time(), worker_id="w")[0]
    gets = counting_gets(pg, monkeypatch)
    out = watch_in_thread(pg, "w1")
    finish_after(1.5, lambda: pg.complete([Ack(lease.id, lease.token)], time.time()), out)
    assert out["job"].state is JobState.COMPLETED
    # a wake-up, not the safety poll (seconds); 250 ms leaves room for a loaded CI machine
    assert out["latency"] < 0.25, f"returned {out['latency'] * 1000:.0f} ms after the commit"
    assert len(gets) <= 4, f"{len(gets)} reads of the job in 1.5 s: a poll, not a wake-up"


@pytest.mark.parametrize("how", ["cancel", "delete", "dead_letter"])
def test_every_way_a_job_ends_wakes_its_waiter(
    pg: PostgresBroker, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.enqueue([job("w2", delay=3600 if how != "dead_letter" else 0)], time.time())
    if how == "dead_letter":
        lease = pg.claim(["default"], time.time(), worker_id="w")[0]
    gets = counting_gets(pg, monkeypatch)
    out = watch_in_thread(pg, "w2")
    actions: dict[str, Callable[[], Any]] = {
        "cancel": lambda: pg.cancel("w2", time.time()),
        "delete": lambda: pg.delete_job("w2", time.time()),
        "dead_letter": lambda: pg.fail(
            "w2", lease.token, time.time(), error={"kind": "error"}, retry_at=None
        ),
    }
    finish_after(1.0, actions[how], out)
    assert out["latency"] < 0.25
    assert len(gets) <= 4
    if how == "delete":
        assert out["job"] is None
    else:
        assert out["job"].state in (JobState.CANCELLED, JobState.DEAD_LETTER)


def test_many_waiters_share_one_listener_and_all_wake(
    pg: PostgresBroker, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.enqueue([job(f"m{i}") for i in range(8)], time.time())
    leases = pg.claim(["default"], time.time(), limit=8, worker_id="w")
    until_listening(pg, monkeypatch)
    outs = [watch_in_thread(pg, lease.id) for lease in leases]
    time.sleep(0.5)  # the waiters are waiting (one that is not yet reads the job completed)
    with psycopg.connect(pg_server.url, autocommit=True) as admin:
        listening = admin.execute(
            # a waiters' listener's last statement takes its advisory lock (after its LISTEN)
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND"
            " (query LIKE 'LISTEN%%' OR query LIKE '%%pg_advisory_lock_shared%%')"
        ).fetchone()
    assert listening is not None and listening[0] <= 2, "one listener per process, not per waiter"
    pg.complete([Ack(lease.id, lease.token) for lease in leases], time.time())
    done = time.monotonic()
    for out in outs:
        out["thread"].join(30)
        assert out["job"].state is JobState.COMPLETED
        assert out["at"] - done < 5.0  # the NOTIFY: a safety slice would take 30 s


def test_a_killed_listener_costs_at_most_the_safety_poll(
    pg: PostgresBroker, pg_server: Any
) -> None:
    pg.enqueue([job("k1"), job("k2")], time.time())
    leases = {lease.id: lease for lease in pg.claim(["default"], time.time(), limit=2)}
    out = watch_in_thread(pg, "k1")
    time.sleep(0.5)
    with psycopg.connect(pg_server.url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%%'"
        )
    time.sleep(0.2)
    finish_after(0.0, lambda: pg.complete([Ack("k1", leases["k1"].token)], time.time()), out)
    assert out["job"].state is JobState.COMPLETED
    assert out["latency"] < 2.5, "the safety re-read finds the job after a lost notification"
    out2 = watch_in_thread(pg, "k2")  # the listener reconnected: prompt again
    finish_after(1.5, lambda: pg.complete([Ack("k2", leases["k2"].token)], time.time()), out2)
    assert out2["latency"] < 0.25
