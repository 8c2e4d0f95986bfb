"""Jobs and dead-letter pages: bulk selection and bulk actions with a confirmation step, run
now, state-aware rendering, time zone markup and actions that return to where you were."""

from __future__ import annotations

import html
import json
import re
from urllib.parse import unquote

from starlette.testclient import TestClient

from conveyor import Conveyor, FakeClock, JobState
from conveyor.monitoring.actions import AUDIT_LOG

from .conftest import make_client

HX = {"HX-Request": "true"}


def dead_letters(app: Conveyor, n: int) -> list[str]:
    ids = [app.enqueue("boom", [i]).id for i in range(n)]
    app.worker().run_until_idle()
    return ids


def audit(app: Conveyor) -> list[dict[str, object]]:
    return app.broker.logs.read(AUDIT_LOG, 100)


def test_bulk_on_selected_jobs_confirms_then_applies(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    ids = [dash_app.enqueue("add", [i, i], delay=600).id for i in range(3)]
    page = client.get("/jobs?state=scheduled").text
    assert 'id="bulk-form"' in page and 'class="select-all"' in page
    assert all(f'value="{i}" form="bulk-form"' in page for i in ids)
    form = {
        "csrf_token": token,
        "bulk": "selected:run_now",
        "ids": ids[:2],
        "next": "/jobs?state=scheduled",
        "state": "scheduled",
    }
    confirm = client.post("/jobs/bulk", data=form)
    assert confirm.status_code == 200 and "Run now 2 jobs?" in confirm.text
    assert dash_app.get_job(ids[0]).state == JobState.SCHEDULED, "nothing happens before confirming"
    r = client.post("/jobs/bulk", data={**form, "confirm": "yes"}, follow_redirects=False)
    assert r.status_code == 303
    assert unquote(r.headers["location"]).startswith("/jobs?state=scheduled&flash=Run now: 2 of 2")
    states = [dash_app.get_job(i).state for i in ids]
    assert states == [JobState.PENDING, JobState.PENDING, JobState.SCHEDULED]
    entries = [e for e in audit(dash_app) if e["action"] == "jobs.bulk_run_now"]
    assert len(entries) == 1 and entries[0]["result"] == 2 and entries[0]["target"] == "selection"


def test_bulk_on_every_search_result_shows_the_count_and_filters(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    dead = dead_letters(dash_app, 3)
    keep = dash_app.enqueue("add", [1, 1]).id
    page = client.get("/dead?task=boom").text
    assert 'value="all:retry"' in page and 'id="match-count">3<' in page
    form = {"csrf_token": token, "bulk": "all:retry", "task": "boom", "state": "dead_letter"}
    confirm = client.post("/jobs/bulk", data={**form, "next": "/dead?task=boom"})
    assert "Retry 3 jobs?" in confirm.text and "dead_letter" in confirm.text
    r = client.post(
        "/jobs/bulk", data={**form, "confirm": "yes", "next": "/dead?task=boom"}, headers=HX
    )
    assert r.status_code == 204 and r.headers["HX-Redirect"].startswith("/dead?task=boom&flash=")
    assert all(dash_app.get_job(i).state == JobState.PENDING for i in dead)
    assert dash_app.get_job(keep).state == JobState.PENDING
    entry = next(e for e in audit(dash_app) if e["action"] == "jobs.bulk_retry")
    assert entry["filters"] == {"state": "dead_letter", "task": "boom"} and entry["result"] == 3


def test_bulk_delete_and_cancel_from_the_jobs_page(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    pending = [dash_app.enqueue("add", [i, 0]).id for i in range(2)]
    base = {"csrf_token": token, "confirm": "yes", "ids": pending}
    client.post("/jobs/bulk", data={**base, "bulk": "selected:cancel"})
    assert {dash_app.get_job(i).state for i in pending} == {JobState.CANCELLED}
    client.post("/jobs/bulk", data={**base, "bulk": "selected:delete"})
    assert all(dash_app.broker.get(i) is None for i in pending)


def test_bulk_refusals(browser_client: tuple[TestClient, str], dash_app: Conveyor) -> None:
    client, token = browser_client
    r = client.post(
        "/jobs/bulk", data={"csrf_token": token, "bulk": "selected:retry"}, follow_redirects=False
    )
    assert r.status_code == 303 and "Select at least one job" in unquote(r.headers["location"])
    r = client.post("/jobs/bulk", data={"csrf_token": token, "bulk": "all:explode"})
    assert r.status_code == 422 and "bulk" in r.text
    r = client.post("/jobs/bulk", data={"bulk": "all:retry", "confirm": "yes"})
    assert r.status_code == 403, "CSRF token required"
    with make_client(dash_app, read_only=True) as ro:
        page = ro.get("/jobs", headers={"Authorization": "Bearer test-token-0123456789abcdef"})
        assert 'id="bulk-form"' not in page.text


def test_run_now_of_one_scheduled_job(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    job = dash_app.enqueue("add", [1, 2], delay=3600)
    detail = client.get(f"/jobs/{job.id}").text
    assert 'id="run-now"' in detail and f"/jobs/{job.id}/run-now" in detail
    listing = client.get("/jobs?state=scheduled").text
    assert f"/jobs/{job.id}/run-now" in listing
    r = client.post(
        f"/jobs/{job.id}/run-now",
        data={"csrf_token": token, "next": "/jobs?state=scheduled"},
        follow_redirects=False,
    )
    assert unquote(r.headers["location"]).startswith("/jobs?state=scheduled&flash=Job made due")
    assert dash_app.get_job(job.id).state == JobState.PENDING
    assert 'id="run-now"' not in client.get(f"/jobs/{job.id}").text


def test_retry_from_the_dead_letter_list_stays_on_the_list(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    dead = dead_letters(dash_app, 2)
    page = client.get("/dead?queue=default&page=1").text
    match = re.search(rf'hx-post="/jobs/{dead[0]}/retry" hx-vals=\'([^\']*)\'', page)
    assert match, "the retry button carries the page to come back to"
    assert json.loads(html.unescape(match.group(1))) == {"next": "/dead?queue=default&page=1"}
    r = client.post(
        f"/jobs/{dead[0]}/retry",
        data={"csrf_token": token, "next": "/dead?queue=default&page=1"},
        headers=HX,
    )
    assert unquote(r.headers["HX-Redirect"]).startswith(
        "/dead?queue=default&page=1&flash=Job requeued"
    )
    r = client.post(  # without a next: the page it came from (htmx sends HX-Current-URL)
        f"/jobs/{dead[1]}/retry",
        headers={**HX, "X-CSRF-Token": token, "HX-Current-URL": "http://127.0.0.1/dead?task=boom"},
    )
    assert r.headers["HX-Redirect"].startswith("/dead?task=boom&flash=")


def test_a_completed_jobs_old_errors_are_history(
    browser_client: tuple[TestClient, str], dash_app: Conveyor, clock: FakeClock
) -> None:
    client, _ = browser_client
    calls = []

    @dash_app.task(name="shaky", max_attempts=3)
    def shaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first try failed")
        return "ok"

    job = shaky.enqueue()
    dash_app.worker().run_until_idle()
    clock.advance(3600)
    dash_app.worker().run_until_idle()
    assert job.refresh().state == JobState.COMPLETED and job.refresh().errors
    page = client.get(f"/jobs/{job.id}").text
    assert 'id="earlier-error"' in page and 'id="last-error"' not in page
    assert "Earlier errors" in page and 'class="card past"' in page
    assert '<div class="err">' not in page, "no error shown as an alert"
    row = client.get("/jobs?task=shaky").text
    assert '<td class="past"' in row and '<td class="err"' not in row
    failing = dead_letters(dash_app, 1)[0]
    assert 'id="last-error"' in client.get(f"/jobs/{failing}").text


def test_a_paused_schedule_lists_no_next_runs(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    dash_app.schedule_cron("nightly", "add", "0 3 * * *", args=[1, 2])
    dash_app.scheduler().tick()
    row = client.get("/schedules").text
    assert re.search(r'class="next-runs"><div><time class="ts"', row)
    r = client.post(
        "/schedules/nightly/pause",
        data={"csrf_token": token, "next": "/schedules"},
        follow_redirects=False,
    )
    assert r.headers["location"].startswith("/schedules?flash=")
    paused = client.get("/schedules").text
    cell = re.search(r'class="next-runs">(.*?)</td>', paused)
    assert cell and "paused" in cell.group(1) and "<time" not in cell.group(1)


def test_timestamps_carry_epoch_for_the_time_zone_toggle(
    browser_client: tuple[TestClient, str], dash_app: Conveyor, clock: FakeClock
) -> None:
    client, _ = browser_client
    job = dash_app.enqueue("add", [1, 2])
    page = client.get(f"/jobs/{job.id}").text
    assert f'data-ts="{clock.now()!r}"' in page and 'datetime="2023-11-14T22:13:20Z"' in page
    assert 'class="tz-toggle"' in page and "/static/dashboard.js" in page
    assert client.get("/static/dashboard.js").status_code == 200
    assert 'class="tz-name">UTC<' in client.get("/jobs").text
