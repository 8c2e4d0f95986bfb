"""A real ``conveyor worker`` process obeys the dashboard: QUIET (stop claiming, finish the
running job, stay up) and then STOP (drain and exit 0), each within a few heartbeats.

The worker runs ``tests.worker.apps.jobs:app`` on each shared backend (a SQLite file, Redis,
PostgreSQL; heartbeat 0.5 s); the dashboard is the real ASGI app in this process, over the same
store, called with the API token.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

from conveyor import Conveyor, JobState
from conveyor.dashboard import DashboardConfig, create_app
from tests.worker.conftest import wait_until
from tests.worker.harness import WorkerProcess

TOKEN = "control-token-0123456789abcdef"


def test_dashboard_quiets_then_stops_a_real_worker_process(shared_url: str, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    url = shared_url
    app = Conveyor(url)
    worker = WorkerProcess(url, tmp_path)
    try:
        running = app.enqueue("sleeper", ["a", 2.0])
        [record] = wait_until(app.workers, timeout=20.0)
        wait_until(lambda: running.refresh().state is JobState.ACTIVE, timeout=10.0)
        seg = quote(str(record["id"]), safe="")
        web = create_app(app, DashboardConfig(token=TOKEN))
        with TestClient(web, base_url="http://127.0.0.1") as client:
            client.headers["Authorization"] = f"Bearer {TOKEN}"
            r = client.post(f"/workers/{seg}/quiet", follow_redirects=False)
            assert r.status_code == 303, r.text
            asked = time.monotonic()
            wait_until(lambda: app.workers()[0].get("state") == "quiet", timeout=5.0)
            assert time.monotonic() - asked < 2.5, "honoured within a few 0.5 s heartbeats"
            late = app.enqueue("sleeper", ["b", 0.1])
            wait_until(lambda: running.refresh().state is JobState.COMPLETED, timeout=10.0)
            time.sleep(1.5)  # three heartbeats more: still nothing claimed, still alive
            assert late.refresh().state is JobState.PENDING
            assert worker.proc.poll() is None, "quiet is not stop"
            r = client.post(f"/workers/{seg}/stop", follow_redirects=False)
            assert r.status_code == 303, r.text
            try:
                code = worker.wait(timeout=15.0)
            except Exception:
                raise AssertionError(worker.output()) from None
            assert code == 0, worker.output()
        assert app.workers() == []
        assert late.refresh().state is JobState.PENDING
        assert "asked it to go quiet" in worker.output()
        assert "asked it to stop" in worker.output()
    finally:
        worker.close()
        app.close()
