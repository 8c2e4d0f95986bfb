"""Hostile job data on every backend and every page: ids with ``../``, markup, newlines, long
strings and unicode are shown as text, addressed as one path segment, and act on their own job.

Values come from ``tests/support/hostile.py``.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, unquote

from starlette.testclient import TestClient

from conveyor import Conveyor, PermanentError
from conveyor.monitoring.rules import QueueDepth
from tests.support.hostile import HOSTILE_TEXT, store_unvalidated

V1 = "/api/v1"
TRAVERSAL = HOSTILE_TEXT["path_traversal"]  # "zz/../../jobs/victim-1"
VICTIM = "victim-1"
#: Hostile values short enough to be job ids. Enqueue refuses ``/`` and control characters in ids
#: now, but older versions and other clients stored them: they are written through the broker.
HOSTILE_IDS = {k: v for k, v in HOSTILE_TEXT.items() if len(v) <= 200}


def seg(job_id: str) -> str:
    """A job id as one URL path segment."""
    return quote(job_id, safe="")


def attr_urls(html: str) -> list[str]:
    """Every href / action / hx-post / sse-connect value of a page (entities decoded)."""
    found = re.findall(r'(?:href|action|hx-post|sse-connect)="([^"]*)"', html)
    return [u.replace("&amp;", "&").replace("&#34;", '"').replace("&#39;", "'") for u in found]


def hostile_setup(app: Conveyor) -> dict[str, str]:
    """A completed victim, and one dead letter per hostile id; returns name -> id."""

    @app.task(name="hostile.fail", max_attempts=1)
    def fail(*args: Any, **kwargs: Any) -> None:
        raise PermanentError(str(kwargs.get("why", "")))

    app.enqueue("add", [1, 2], job_id=VICTIM)
    ids = {}
    for name, text in HOSTILE_TEXT.items():
        ids[name] = store_unvalidated(
            app,
            HOSTILE_IDS.get(name, f"long-{name}"),
            "hostile.fail",
            text,
            {"nested": text},
            kwargs={"why": text},
            metadata={"note": text},
            idempotency_key=f"key-{name}",
        )
    app.worker().run_until_idle()
    assert app.get_job(VICTIM).state == "completed"
    return ids


def test_a_traversal_id_is_one_segment_in_every_link(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    hostile_setup(dash_app)
    pages = ["/dead", "/jobs", f"/jobs/{seg(TRAVERSAL)}", "/queues/default"]
    for page in pages:
        r = client.get(page)
        assert r.status_code == 200, page
        for url in attr_urls(r.text):
            assert "/../" not in url and not url.startswith("/jobs/zz/"), (page, url)
        if page in ("/dead", "/jobs"):
            assert f"/jobs/{seg(TRAVERSAL)}" in attr_urls(r.text), page
    detail = client.get(f"/jobs/{seg(TRAVERSAL)}")
    assert 'id="job-state"' in detail.text and "zz/../../jobs/victim-1" in detail.text
    assert f"/live/job/{seg(TRAVERSAL)}" in attr_urls(detail.text)
    # The delete button of the dead-letter page deletes that job and only that job.
    dead = client.get("/dead?text=zz").text
    delete = next(u for u in attr_urls(dead) if u.endswith("/delete") and "zz" in u)
    r = client.post(delete, headers={"X-CSRF-Token": token, "HX-Request": "true"})
    assert r.status_code == 204 and r.headers["HX-Redirect"].startswith("/dead")
    assert dash_app.broker.get(TRAVERSAL) is None
    assert dash_app.get_job(VICTIM).state == "completed"


def test_html_actions_and_redirects_keep_the_id_whole(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    ids = hostile_setup(dash_app)
    h = {"X-CSRF-Token": token, "HX-Request": "true"}
    for job_id in ids.values():
        r = client.post(f"/jobs/{seg(job_id)}/retry", headers=h)
        assert r.status_code == 204, (job_id, r.text)
        target = r.headers["HX-Redirect"]
        assert target.startswith(f"/jobs/{seg(job_id)}?"), target
        assert unquote(target.split("?")[0][len("/jobs/") :]) == job_id
        assert dash_app.get_job(job_id).state == "pending"
        r = client.post(
            f"/jobs/{seg(job_id)}/cancel", data={"csrf_token": token}, follow_redirects=False
        )
        assert r.status_code == 303 and r.headers["location"].startswith(f"/jobs/{seg(job_id)}?")
        assert dash_app.get_job(job_id).state == "cancelled"
    assert dash_app.get_job(VICTIM).state == "completed"


def test_api_addresses_a_traversal_id_as_one_segment(api: TestClient, dash_app: Conveyor) -> None:
    ids = hostile_setup(dash_app)
    for job_id in ids.values():
        r = api.get(f"{V1}/jobs/{seg(job_id)}")
        assert r.status_code == 200 and r.json()["id"] == job_id
    assert api.post(f"{V1}/jobs/{seg(TRAVERSAL)}/retry").json() == {"ok": True}
    assert api.post(f"{V1}/jobs/{seg(TRAVERSAL)}/cancel").json() == {"ok": True}
    assert api.delete(f"{V1}/jobs/{seg(TRAVERSAL)}").json() == {"ok": True}
    assert dash_app.broker.get(TRAVERSAL) is None
    assert dash_app.get_job(VICTIM).state == "completed"
    # The unencoded form is not a route: it can never reach another job.
    assert api.delete(f"{V1}/jobs/zz%2F..%2F..%2Fjobs%2F{VICTIM}").status_code == 404
    assert dash_app.get_job(VICTIM).state == "completed"
    listed = api.get(f"{V1}/jobs", params={"state": "dead_letter", "page_size": 100}).json()
    assert {j["id"] for j in listed["items"]} == set(ids.values()) - {TRAVERSAL}


def _balanced(html: str, tag: str) -> bool:
    return len(re.findall(f"<{tag}[ >]", html)) == len(re.findall(f"</{tag}>", html))


def test_every_page_and_endpoint_shows_hostile_data_as_text(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    ids = hostile_setup(dash_app)
    dash_app.schedule_cron("nightly", "add", "0 3 * * *", args=[HOSTILE_TEXT["markup"]])
    dash_app.alerts.add_rule(QueueDepth(threshold=0))
    dash_app.enqueue("add", [HOSTILE_TEXT["markup"], 1], queue="pending")
    dash_app.alerts.evaluate()
    pages = ["/", "/jobs", "/dead", "/schedules", "/alerts", "/audit", "/queues/default"]
    pages += ["/queues/pending", "/jobs?text=script", "/dead?text=%3Cscript%3E"]
    pages += [f"/jobs/{seg(i)}" for i in ids.values()]
    for path in pages:
        r = client.get(path)
        assert r.status_code == 200, path
        html = r.text
        assert "<script>alert" not in html and "<img src=x" not in html, path
        assert "<script>" not in html.replace('<script src="/static/', ""), path
        assert "[bold red]" not in html or "&lt;" in html  # text, never a style
        assert html.rstrip().endswith("</html>"), path
        for tag in ("table", "tr", "div", "pre", "details"):
            assert _balanced(html, tag), (path, tag)
    detail = client.get(f"/jobs/{seg(ids['markup'])}").text
    assert "&lt;script&gt;alert(" in detail and "&lt;img src=x onerror=alert(1)&gt;" in detail
    for op in (
        "/overview",
        "/queues",
        "/queues/default",
        "/workers",
        "/jobs",
        "/dead-letters",
        "/schedules",
        "/alerts",
        "/metrics",
        "/events?limit=1000",
        "/audit",
    ):
        r = client.get(V1 + op)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json", op
    for name, job_id in ids.items():
        body = client.get(f"{V1}/jobs/{seg(job_id)}").json()
        assert (
            body["args"][0] == HOSTILE_TEXT[name] and body["metadata"]["note"] == HOSTILE_TEXT[name]
        )
        assert HOSTILE_TEXT[name][:50] in body["errors"][0]["message"]
    assert client.get("/metrics").status_code == 200
