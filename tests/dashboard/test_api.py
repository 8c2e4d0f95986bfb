"""The JSON API: every endpoint, on every backend, with the bearer token."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor, FakeClock
from conveyor.dashboard.api import OPERATIONS, PREFIX
from conveyor.monitoring.rules import QueueDepth

V1 = PREFIX


def dead_job(app: Conveyor, *args: Any) -> str:
    job = app.enqueue("boom", list(args))
    app.worker().run_until_idle()
    return job.id


def test_enqueue_by_task_name(api: TestClient, dash_app: Conveyor) -> None:
    r = api.post(
        f"{V1}/jobs",
        json={"task": "emails.send", "args": ["a@x.com"], "priority": -1, "idempotency_key": "k1"},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["queue"] == "emails" and body["state"] == "pending" and not body["duplicate"]
    again = api.post(
        f"{V1}/jobs", json={"task": "emails.send", "args": ["a@x.com"], "idempotency_key": "k1"}
    )
    assert (
        again.status_code == 200 and again.json()["id"] == body["id"] and again.json()["duplicate"]
    )
    later = api.post(f"{V1}/jobs", json={"task": "not.registered.here", "delay": 60})
    assert later.status_code == 201 and later.json()["state"] == "scheduled"
    assert dash_app.get_job(body["id"]).priority == -1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "task"),
        ({"task": "add", "args": {"a": 1}}, "args"),
        ({"task": "add", "kwargs": [1]}, "kwargs"),
        ({"task": "add", "bogus": 1}, "bogus"),
        ({"task": "bad name!"}, "task"),
        ({"task": "add", "queue": "a b"}, "queue"),
        ({"task": "add", "priority": "high"}, "priority"),
    ],
)
def test_enqueue_rejects_bad_input(api: TestClient, body: dict[str, Any], field: str) -> None:
    r = api.post(f"{V1}/jobs", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field


def test_bad_json_body(api: TestClient) -> None:
    r = api.post(f"{V1}/jobs", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["field"] == "body"
    r = api.post(f"{V1}/jobs", content=b"[1]", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_reads(api: TestClient, dash_app: Conveyor, clock: FakeClock) -> None:
    ok = dash_app.enqueue("add", [1, 2])
    dead = dead_job(dash_app, "<script>")
    dash_app.enqueue("emails.send", ["b@x.com"])
    overview = api.get(f"{V1}/overview").json()
    assert {q["name"] for q in overview["queues"]} == {"default", "emails"}
    assert overview["totals"]["dead_letter"] == 1 and overview["totals"]["completed"] == 1
    queues = api.get(f"{V1}/queues", params={"minutes": 10}).json()["queues"]
    default = next(q for q in queues if q["name"] == "default")
    assert default["dead_letters"] == 1 and default["failure_rate"] == pytest.approx(0.5)
    queue = api.get(f"{V1}/queues/emails").json()
    assert queue["depth"] == 1 and queue["next"][0]["task"] == "emails.send"
    assert len(queue["series"]) == 60
    assert api.get(f"{V1}/queues/nope").status_code == 422
    assert api.get(f"{V1}/workers").json() == {"workers": []}
    job = api.get(f"{V1}/jobs/{ok.id}").json()
    assert job["state"] == "completed" and job["result"] == 3
    assert [t["event"] for t in job["timeline"]] == ["enqueued", "started", "completed"]
    detail = api.get(f"{V1}/jobs/{dead}").json()
    assert detail["errors"][0]["type"] == "PermanentError" and detail["args"] == ["<script>"]
    assert api.get(f"{V1}/jobs/missing").status_code == 404
    metrics = api.get(f"{V1}/metrics", params={"queue": "default", "minutes": 5}).json()
    assert metrics["summary"]["processed"] == 2 and metrics["summary"]["failed"] == 1
    assert api.get(f"{V1}/metrics", params={"minutes": 0}).status_code == 422
    events = api.get(f"{V1}/events", params={"limit": 3}).json()
    assert len(events["events"]) == 3 and events["cursor"]
    rest = api.get(f"{V1}/events", params={"after": events["cursor"], "limit": 1000}).json()
    assert rest["events"][0]["cursor"] != events["events"][-1]["cursor"]
    assert api.get(f"{V1}/schedules").json() == {"schedules": []}


def test_search_filters_and_pagination(
    api: TestClient, dash_app: Conveyor, clock: FakeClock
) -> None:
    for i in range(7):
        dash_app.enqueue("add", [i, 100 + i])
        clock.advance(10)
    dead_job(dash_app, "needle-in-args")
    first = api.get(f"{V1}/jobs", params={"page_size": 3}).json()
    assert first["total"] == 8 and first["pages"] == 3 and first["items"][0]["task"] == "boom"
    third = api.get(f"{V1}/jobs", params={"page_size": 3, "page": 3}).json()
    assert len(third["items"]) == 2
    by = {
        "state": "dead_letter",
        "task": "boom",
        "queue": "default",
        "error": "PermanentError",
        "text": "needle",
        "since": "1h",
        "id": first["items"][0]["id"][:10],
    }
    assert api.get(f"{V1}/jobs", params=by).json()["total"] == 1
    assert api.get(f"{V1}/jobs", params={"text": "104"}).json()["total"] == 1
    assert api.get(f"{V1}/jobs", params={"until": clock.now() - 65}).json()["total"] == 1
    assert api.get(f"{V1}/jobs", params={"state": "bogus"}).status_code == 422
    assert api.get(f"{V1}/jobs", params={"since": "yesterday"}).status_code == 422
    assert api.get(f"{V1}/jobs", params={"page": 0}).status_code == 422
    dead = api.get(f"{V1}/dead-letters", params={"task": "boom"}).json()
    assert dead["total"] == 1 and dead["items"][0]["last_error"].startswith("PermanentError")


def test_job_actions(api: TestClient, dash_app: Conveyor) -> None:
    pending = dash_app.enqueue("add", [1, 1])
    assert api.post(f"{V1}/jobs/{pending.id}/retry").status_code == 409
    assert api.post(f"{V1}/jobs/{pending.id}/cancel").json() == {"ok": True}
    assert api.post(f"{V1}/jobs/{pending.id}/cancel").status_code == 409
    assert api.post(f"{V1}/jobs/{pending.id}/retry").json() == {"ok": True}
    assert dash_app.get_job(pending.id).state == "pending"
    assert api.delete(f"{V1}/jobs/{pending.id}").status_code == 409  # not finished
    dead = dead_job(dash_app)
    assert api.delete(f"{V1}/jobs/{dead}").json() == {"ok": True}
    assert api.get(f"{V1}/jobs/{dead}").status_code == 404
    assert api.post(f"{V1}/jobs/missing/cancel").status_code == 404


def test_dead_letter_bulk_actions(api: TestClient, dash_app: Conveyor) -> None:
    ids = [dead_job(dash_app, f"a{i}") for i in range(3)]
    dash_app.enqueue("boom", ["other"], queue="emails")
    dash_app.worker(["emails"]).run_until_idle()
    r = api.post(f"{V1}/dead-letters/retry", json={"queue": "default", "text": "a1"})
    assert r.json() == {"count": 1}
    assert dash_app.get_job(ids[1]).state == "pending"
    r = api.post(f"{V1}/dead-letters/delete", json={"queue": "default"})
    assert r.json() == {"count": 2}
    assert api.get(f"{V1}/dead-letters").json()["total"] == 1
    # a misspelt filter must not act on every dead letter: refused, naming the field
    for verb in ("retry", "delete"):
        r = api.post(f"{V1}/dead-letters/{verb}", json={"queu": "default"})
        assert r.status_code == 422 and "queu" in r.text, r.text
    assert api.get(f"{V1}/dead-letters").json()["total"] == 1
    assert api.post(f"{V1}/dead-letters/retry", json={}).json() == {"count": 1}


def test_queue_schedule_and_alert_actions(api: TestClient, dash_app: Conveyor) -> None:
    assert api.post(f"{V1}/queues/default/pause").json() == {"ok": True}
    assert "default" in dash_app.broker.paused_queues()
    assert api.post(f"{V1}/queues/default/resume").json() == {"ok": True}
    assert api.post(f"{V1}/queues/bad%20name/pause").status_code == 422
    dash_app.schedule_cron("nightly", "add", "0 3 * * *", args=[1, 2])
    schedules = api.get(f"{V1}/schedules").json()["schedules"]
    assert schedules[0]["name"] == "nightly" and len(schedules[0]["next_runs"]) == 3
    assert api.post(f"{V1}/schedules/nightly/pause").json() == {"ok": True}
    assert api.get(f"{V1}/schedules").json()["schedules"][0]["paused"] is True
    assert api.post(f"{V1}/schedules/nightly/resume").json() == {"ok": True}
    assert api.post(f"{V1}/schedules/missing/pause").status_code == 404
    dash_app.alerts.add_rule(QueueDepth(threshold=0))
    dash_app.enqueue("add", [1, 1])
    dash_app.alerts.evaluate()
    alerts = api.get(f"{V1}/alerts").json()
    assert alerts["alerts"][0]["state"] == "firing" and alerts["rules"][0]["type"] == "queue_depth"
    assert api.post(f"{V1}/alerts/queue_depth:default/acknowledge").json() == {"ok": True}
    assert api.post(f"{V1}/alerts/queue_depth:default/acknowledge").status_code == 409
    audit = api.get(f"{V1}/audit").json()["entries"]
    assert audit[0]["action"] == "alert.acknowledge" and audit[0]["actor"] == "token"
    assert {e["action"] for e in audit} >= {"queue.pause", "schedule.resume"}


def test_openapi_documents_every_route(api: TestClient) -> None:
    doc = api.get(f"{V1}/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == {(op.method, V1 + op.path) for op in OPERATIONS}
    # the routes the server really answers (not the table both are built from)
    served = {
        (method, re.sub(r":segment}", "}", route.path))
        for route in api.app.routes  # type: ignore[attr-defined]
        if getattr(route, "path", "").startswith(V1 + "/")
        for method in (route.methods or ()) - {"HEAD"}
    }
    assert served == documented
    enqueue = doc["paths"][f"{V1}/jobs"]["post"]
    assert enqueue["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "Enqueue"
    )
    assert all(op.get("summary") for ops in doc["paths"].values() for op in ops.values())


def test_every_api_route_needs_auth(dash_app: Conveyor) -> None:
    from .conftest import make_client

    with make_client(dash_app) as anon:
        for op in OPERATIONS:
            path = V1 + op.path.format(id="x", name="default", key="k")
            r = anon.request(op.method, path)
            assert r.status_code == 401, (op.method, path)
            assert r.headers["www-authenticate"].startswith("Bearer")
        assert (
            anon.get(f"{V1}/overview", headers={"Authorization": "Bearer wrong"}).status_code == 401
        )
        assert (
            anon.get(f"{V1}/overview", auth=("admin", "correct horse battery")).status_code == 200
        )


def test_rate_limit_per_client(dash_app: Conveyor) -> None:
    from .conftest import AUTH, make_client

    with make_client(dash_app, rate_limit=1.0, rate_burst=3) as client:
        codes = [client.get(f"{V1}/workers", headers=AUTH).status_code for _ in range(5)]
        assert codes[:3] == [200, 200, 200] and codes[-1] == 429
        r = client.get(f"{V1}/workers", headers=AUTH)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        # Another client (a session, keyed by address) has its own bucket... of the same address
        # in TestClient, so the pages (not rate-limited) still answer.
        assert client.get("/healthz").status_code == 200
