"""Issue 16 in the dashboard, API and CLI: a running job's progress on its page and on the
/workers page, and cancelling a RUNNING job from the page, the API and the CLI (each stores the
cancel request its worker reads: ``broker/jobdocs.py``), on every backend."""

from __future__ import annotations

from starlette.testclient import TestClient

from conveyor import Conveyor, JobState
from conveyor.broker.jobdocs import cancel_requested, write_progress

from .conftest import AUTH
from .test_ops_pages import fake_worker


def _running(app: Conveyor) -> str:
    """An active job of task ``add`` with a progress report."""
    job = app.enqueue("add", [1, 2])
    lease = app.broker.claim(["default"], app.now(), limit=1, worker_id="host-a:4242:abc")[0]
    assert lease.id == job.id
    progress = {"fraction": 0.4, "message": "resized 2 of 5", "attempt": 1, "at": app.now()}
    write_progress(app.broker, job.id, progress, app.now())
    return job.id


def test_job_page_shows_progress_and_cancels_a_running_job(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    job_id = _running(dash_app)
    html = client.get(f"/jobs/{job_id}").text
    assert 'id="job-progress"' in html and 'value="0.4"' in html
    assert "40% resized 2 of 5" in html
    assert f'hx-post="/jobs/{job_id}/cancel"' in html, "a running job has a Cancel button"
    r = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303
    assert cancel_requested(dash_app.broker, {job_id}, dash_app.now()) == {job_id}
    assert dash_app.get_job(job_id).state is JobState.ACTIVE  # its worker stops it
    entry = dash_app.broker.logs.read("audit", 10)[0]
    assert (entry["action"], entry["target"], entry["result"]) == ("job.cancel", job_id, "ok")
    assert entry["actor"] == "admin"


def test_api_cancels_a_running_job(dash_app: Conveyor) -> None:
    from .conftest import make_client

    job_id = _running(dash_app)
    with make_client(dash_app) as api:
        api.headers.update(AUTH)
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").json() == {"ok": True}
        detail = api.get(f"/api/v1/jobs/{job_id}").json()
    assert cancel_requested(dash_app.broker, {job_id}, dash_app.now()) == {job_id}
    assert detail["progress"]["fraction"] == 0.4 and detail["cancel_requested"] is True


def test_workers_page_shows_the_progress_of_running_jobs(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    job_id = _running(dash_app)
    jobs = [{"id": job_id, "task": "add", "queue": "default", "started_at": dash_app.now()}]
    fake_worker(dash_app, running=[job_id], jobs=jobs)
    assert "40% resized 2 of 5" in client.get("/fragments/workers").text


def test_cli_cancels_a_running_job(dash_app: Conveyor) -> None:
    import sys
    import types

    from tests.cli.conftest import run, run_json

    job_id = _running(dash_app)
    module = types.ModuleType("jobctx_cli_app")
    module.app = dash_app  # type: ignore[attr-defined]
    sys.modules["jobctx_cli_app"] = module
    try:
        shown = run("job", job_id, "--app", "jobctx_cli_app:app").output
        out = run_json("cancel", job_id, "--app", "jobctx_cli_app:app")
        after = run("job", job_id, "--app", "jobctx_cli_app:app").output
    finally:
        del sys.modules["jobctx_cli_app"]
    assert "40% resized 2 of 5" in shown and "requested" not in shown
    assert out == {"done": [job_id], "refused": []}
    assert "requested: its worker is stopping it" in after
    assert cancel_requested(dash_app.broker, {job_id}, dash_app.now()) == {job_id}


def test_hostile_progress_messages_are_escaped(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    from tests.support.hostile import HOSTILE_TEXT

    client, _ = browser_client
    job_id = _running(dash_app)
    jobs = [{"id": job_id, "task": "add", "queue": "default", "started_at": dash_app.now()}]
    fake_worker(dash_app, running=[job_id], jobs=jobs)
    for text in HOSTILE_TEXT.values():
        value = {"fraction": 0.5, "message": text[:1000], "attempt": 1, "at": dash_app.now()}
        write_progress(dash_app.broker, job_id, value, dash_app.now())
        for html in (client.get(f"/jobs/{job_id}").text, client.get("/fragments/workers").text):
            assert "<script>alert" not in html and "<img src=x" not in html
            assert "50%" in html
