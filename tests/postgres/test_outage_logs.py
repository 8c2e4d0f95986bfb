"""Issue 20 on PostgreSQL: an outage is logged once with the error, then once on recovery with
the retry count and duration; never a traceback per retry (as tests/redis/test_outage_logs.py),
and no psycopg_pool warning per reconnect attempt of Conveyor's pool (those go to DEBUG).

A private cluster (not the session's) is killed with SIGKILL and restarted on the same port
while a worker and the scheduler run in threads; the waiters' listener reconnects too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from conveyor import Conveyor
from tests.support import pg_proc

pytestmark = pytest.mark.timeout(120)
OUTAGE = 4.0  # seconds the server stays down


@pytest.fixture
def private_pg() -> Iterator[pg_proc.PgServer]:
    if not pg_proc.available():
        pytest.skip("PostgreSQL server binaries are not installed")
    server = pg_proc.PgServer().start()
    yield server
    server.stop()


def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_outage_logged_once_then_recovery(
    private_pg: pg_proc.PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = Conveyor(private_pg.url)
    done: list[int] = []

    @app.task
    def note(i: int) -> int:
        done.append(i)
        return i

    app.schedule_cron("tick", "note", every=1, args=[0])
    scheduler = app.scheduler(interval=0.05)
    worker = app.worker(queues=["default"], concurrency=2)
    threads = [threading.Thread(target=t.run, daemon=True) for t in (scheduler, worker)]
    for thread in threads:
        thread.start()
    assert note.enqueue(1).wait(timeout=20) == 1  # the waiters' listener is up too
    conveyor_records = lambda: [r for r in caplog.records if r.name.startswith("conveyor")]  # noqa: E731
    with caplog.at_level(logging.INFO):
        caplog.clear()
        private_pg.kill()
        _until(
            lambda: any("lost the connection" in r.getMessage() for r in caplog.records),
            "the outage was noticed",
        )
        time.sleep(OUTAGE)
        during = [r for r in conveyor_records() if r.levelno >= logging.WARNING]
        private_pg.start()
        _until(
            lambda: any("reconnected" in r.getMessage() for r in caplog.records),
            "the recovery was logged",
            timeout=30,
        )
        assert note.enqueue(2).wait(timeout=30) == 2, "jobs run (and are waited for) again"
    retries = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "conveyor-" in r.getMessage()
    ]
    assert retries == [], "psycopg_pool's line per reconnect attempt of Conveyor's pool"
    lines = [r.getMessage() for r in during]
    assert [r for r in during if r.exc_info] == [], lines  # no traceback during the outage
    assert sum("lost the connection" in m for m in lines) == 1, lines
    assert len(during) <= 3, lines  # the loss line (plus at most a reminder or two)
    recovered = [r.getMessage() for r in caplog.records if "reconnected" in r.getMessage()]
    assert len(recovered) == 1 and "retries" in recovered[0] and " s" in recovered[0]
    scheduler.stop()
    worker.stop(timeout=5)
    for thread in threads:
        thread.join(10)
    app.close()


def test_readyz_fails_promptly_while_postgres_is_down(private_pg: pg_proc.PgServer) -> None:
    """The worker's readiness probe answers 503 while the server is down (within a probe's
    usual timeout), /healthz stays 200, and /readyz is 200 again after the restart."""
    from tests.contrib.test_health_endpoints import get, serve

    app = Conveyor(private_pg.url)
    server, base = serve(app)
    try:
        assert get(base + "/readyz")[0] == 200
        private_pg.kill()
        for _ in range(3):  # the first finds the dead connection, the next ones no server
            began = time.monotonic()
            status, _, body = get(base + "/readyz")
            assert status == 503 and body.startswith("broker unavailable"), body
            assert time.monotonic() - began < 3.0, "a Kubernetes probe would time out first"
        assert get(base + "/healthz")[0] == 200  # do not restart a worker for a broker outage
        private_pg.start()
        _until(lambda: get(base + "/readyz")[0] == 200, "ready again after the restart")
    finally:
        server.shutdown()
        server.server_close()
        app.close()
