"""conveyor.contrib.starlette: a lifespan-managed worker, async enqueue, the mounted dashboard.

Real FastAPI app, real SQLite file, real worker thread: jobs enqueued by an endpoint complete
while the app runs, and shutdown drains the worker.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI
from starlette.testclient import TestClient

from conveyor import Conveyor, JobState
from conveyor.contrib import starlette as cs
from conveyor.dashboard.security import DashboardConfig
from conveyor.errors import ValidationError

TOKEN = "t" * 24


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.02)


def make_api(tmp_path: Path) -> tuple[FastAPI, Conveyor, list[str]]:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    seen: list[str] = []

    @app.task
    def greet(name: str) -> str:
        seen.append(name)
        return f"hello {name}"

    api = FastAPI(lifespan=cs.lifespan(app, concurrency=2, shutdown_timeout=5))

    @api.post("/greet/{name}")
    async def post_greet(name: str) -> dict[str, str]:
        job = await cs.enqueue(greet, name)
        return {"id": job.id}

    return api, app, seen


def test_lifespan_worker_runs_jobs_enqueued_by_an_endpoint(tmp_path: Path) -> None:
    api, app, seen = make_api(tmp_path)
    with TestClient(api) as client:
        runner = api.state.conveyor_worker
        assert runner.alive and runner.worker.started_at is not None
        job_id = client.post("/greet/ada").json()["id"]
        wait_for(lambda: app.get_job(job_id).state is JobState.COMPLETED)
        assert app.get_job(job_id).result == "hello ada"
    # shutdown drained the worker: its thread ended, cleanly
    assert not runner.alive and runner.exit_code == 0
    assert seen == ["ada"]


def test_shutdown_hands_back_a_job_that_outlasts_the_drain(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    started, release = threading.Event(), threading.Event()

    @app.task
    def slow() -> None:
        started.set()
        release.wait(30)

    api = FastAPI(lifespan=cs.lifespan(app, shutdown_timeout=0.5))
    try:
        with TestClient(api):
            job = slow.enqueue()
            assert started.wait(20)
        # the running job outlived the drain: released to pending, not lost, no attempt charged
        assert app.get_job(job.id).state is JobState.PENDING
        assert app.get_job(job.id).attempts == 0
    finally:
        release.set()


def test_worker_lifespan_nests_in_a_lifespan_of_ones_own(tmp_path: Path) -> None:
    from contextlib import asynccontextmanager

    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    done: list[int] = []
    app.task(lambda n: done.append(n), name="add")
    events: list[str] = []

    @asynccontextmanager
    async def own(api: FastAPI) -> Any:
        events.append("open db")
        async with cs.worker_lifespan(app, "default") as runner:
            events.append("worker up" if runner.alive else "worker down")
            yield
        events.append("close db")

    with TestClient(FastAPI(lifespan=own)):
        app.enqueue("add", args=[7])
        wait_for(lambda: done == [7])
    assert events == ["open db", "worker up", "close db"]


# --------------------------------------------------------------------- the mounted dashboard
def mounted(app: Conveyor, config: DashboardConfig) -> TestClient:
    api = FastAPI()
    cs.mount_dashboard(api, app, "/admin/jobs", config, allowed_hosts=["127.0.0.1"])
    return TestClient(api, base_url="http://127.0.0.1")  # no credentials: loopback only


def test_mounted_dashboard_serves_pages_api_and_assets_under_the_prefix() -> None:
    app = Conveyor("memory://")
    app.enqueue("send_email", args=["x"])
    client = mounted(app, DashboardConfig())
    page = client.get("/admin/jobs/")
    assert page.status_code == 200 and "<html" in page.text
    queues = client.get("/admin/jobs/api/v1/queues").json()["queues"]
    assert [q["name"] for q in queues] == ["default"]
    assert client.get("/admin/jobs/static/favicon.svg").status_code == 200
    assert client.get("/api/v1/queues").status_code == 404  # nothing outside the prefix


def test_mounted_dashboard_keeps_the_standalone_auth_rule() -> None:
    app = Conveyor("memory://")
    client = mounted(app, DashboardConfig(token=TOKEN))
    for path in ("/admin/jobs/", "/admin/jobs/api/v1/queues"):
        refused = client.get(path, follow_redirects=False)
        assert refused.status_code in (401, 303)  # to the log-in page, as standalone
    ok = client.get("/admin/jobs/api/v1/queues", headers={"authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200


def test_mounted_dashboard_refuses_foreign_host_headers() -> None:
    app = Conveyor("memory://")
    client = mounted(app, DashboardConfig())
    assert client.get("/admin/jobs/", headers={"host": "evil.example"}).status_code == 400


def test_mounted_dashboard_links_stay_under_the_prefix() -> None:
    app = Conveyor("memory://")
    html = mounted(app, DashboardConfig()).get("/admin/jobs/").text
    assert 'href="/static/' not in html and 'src="/static/' not in html
    assert 'href="/admin/jobs/static/app.css"' in html and 'href="/admin/jobs/workers"' in html


def test_mount_path_is_validated() -> None:
    with pytest.raises(ValidationError, match="path"):
        cs.mount_dashboard(FastAPI(), Conveyor("memory://"), "admin/jobs/")


def test_a_worker_that_cannot_start_fails_the_startup_naming_why(tmp_path: Path) -> None:
    """A worker whose run() raises at start (``processes=2`` on an app that is not importable
    as module:attribute) used to end its thread silently: the lifespan started and the site
    ran with no worker at all. The start-up now fails with the worker's own error."""
    api, app, _ = make_api(tmp_path)
    api.router.lifespan_context = cs.lifespan(app, processes=2)
    with pytest.raises(ValidationError, match="processes"), TestClient(api):
        pass
