"""The JSON API's operator actions that were pages only: quiet / stop a worker, clear a queue,
history, run a job now and bulk actions — on every backend, with the API's auth and CSRF rules
(bearer header: no CSRF; session cookie: X-CSRF-Token required) and audited like the pages."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from conveyor import Conveyor, JobState
from conveyor.monitoring.filters import SEARCH_FIELDS
from conveyor.worker import control

from .test_ops_pages import audit_actions, fake_worker

V1 = "/api/v1"


def test_worker_quiet_and_stop(api: TestClient, dash_app: Conveyor) -> None:
    group = "host-a:70:1"
    one = fake_worker(dash_app, "host-a:71:a", group=group, processes=2)
    two = fake_worker(dash_app, "host-a:72:b", group=group, processes=2)
    now = dash_app.now()
    r = api.post(f"{V1}/workers/{one}/quiet", json={"scope": "process"})
    assert r.status_code == 200 and r.json() == {"ok": True, "worker": one, "command": "quiet"}
    assert control.read(dash_app.broker, one, now) == "quiet"
    assert control.read(dash_app.broker, two, now) is None
    r = api.post(f"{V1}/workers/{two}/stop")
    assert r.json()["command"] == "stop"
    assert control.read(dash_app.broker, control.group_key(group), now) == "stop"
    assert ("worker.stop", two) in audit_actions(dash_app)
    r = api.post(f"{V1}/workers/{one}/stop", json={"scope": "everything"})
    assert r.status_code == 422 and r.json()["field"] == "scope"
    r = api.post(f"{V1}/workers/nobody/stop")
    assert r.status_code == 422 and r.json()["field"] == "worker"


def test_clear_queue_and_history(api: TestClient, dash_app: Conveyor) -> None:
    for _ in range(3):
        dash_app.enqueue("add", [1, 2], queue="emails")
    dash_app.enqueue("add", [1, 2])
    r = api.post(f"{V1}/queues/emails/clear")
    assert r.status_code == 200 and r.json() == {"ok": True, "queue": "emails", "deleted": 3}
    assert dash_app.broker.counts()["default"]["pending"] == 1
    assert ("queue.clear", "emails") in audit_actions(dash_app)
    assert api.post(f"{V1}/queues/nosuch/clear").status_code == 422
    dash_app.worker().run_until_idle()
    h = api.get(f"{V1}/history", params={"range": "24h"}).json()
    assert h["processed"] == 1 and len(h["points"]) == 1440 and h["step"] == 60
    assert api.get(f"{V1}/history", params={"range": "1y"}).json()["field"] == "range"
    assert api.get(f"{V1}/history", params={"queue": "bad queue!"}).status_code == 422


def test_run_now_and_bulk(api: TestClient, dash_app: Conveyor) -> None:
    later = dash_app.enqueue("add", [1, 2], delay=3600)
    now_job = dash_app.enqueue("add", [3, 4])
    assert api.post(f"{V1}/jobs/{later.id}/run-now").json() == {"ok": True}
    assert later.refresh().state is JobState.PENDING
    r = api.post(f"{V1}/jobs/{now_job.id}/run-now")
    assert r.status_code == 409 and r.json()["ok"] is False
    assert api.post(f"{V1}/jobs/nosuchjob/run-now").status_code == 404
    r = api.post(f"{V1}/jobs/bulk", json={"action": "cancel", "ids": [later.id, "nosuchjob"]})
    assert r.status_code == 200
    assert r.json() == {"action": "cancel", "matched": 2, "done": 1, "truncated": False}
    r = api.post(f"{V1}/jobs/bulk", json={"action": "delete", "filters": {"state": "cancelled"}})
    assert r.json()["done"] == 1 and dash_app.broker.get(later.id) is None
    assert ("jobs.bulk_delete", "search") in audit_actions(dash_app)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"action": "explode", "ids": []}, "action"),
        ({"action": "retry", "ids": "x"}, "ids"),
        ({"action": "retry", "filters": {"nope": 1}}, "filters"),
        ({"action": "retry"}, "ids"),
        ({"action": "retry", "ids": [], "extra": 1}, "extra"),
        ({"action": "delete", "filters": {}}, "filters"),  # would act on every job
        ({"action": "delete", "filters": {"queue": ""}}, "filters"),
    ]
    for body, field in bad:
        r = api.post(f"{V1}/jobs/bulk", json=body)
        assert r.status_code == 422 and r.json()["field"] == field, body


def test_session_callers_need_the_csrf_header(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    dash_app.enqueue("add", [1, 2], queue="emails")
    assert client.post(f"{V1}/queues/emails/clear").status_code == 403
    assert dash_app.broker.counts()["emails"]["pending"] == 1
    r = client.post(f"{V1}/queues/emails/clear", headers={"X-CSRF-Token": token})
    assert r.status_code == 200 and r.json()["deleted"] == 1


def test_a_misspelt_worker_command_field_is_refused(api: TestClient, dash_app: Conveyor) -> None:
    """``{"scop": "process"}`` (a typo of ``scope``) used to be ignored: the stop meant for one
    process went to every process of the worker. Unknown fields are refused, naming the field."""
    group = "host-a:70:1"
    one = fake_worker(dash_app, "host-a:71:a", group=group, processes=2)
    for verb in ("quiet", "stop"):
        r = api.post(f"{V1}/workers/{one}/{verb}", json={"scop": "process"})
        assert r.status_code == 422 and r.json()["field"] == "scop", (verb, r.text)
    now = dash_app.now()
    assert control.read(dash_app.broker, control.group_key(group), now) is None
    assert control.read(dash_app.broker, one, now) is None
    assert audit_actions(dash_app) == []


def test_openapi_state_filter_lists_every_searchable_state(api: TestClient) -> None:
    """A generated client validates ``state`` against the document's enum: ``waiting``
    (workflow nodes) is searchable, so it must be listed."""
    from conveyor import JobState

    doc = api.get(f"{V1}/openapi.json").json()
    [state] = [p for p in doc["paths"][f"{V1}/jobs"]["get"]["parameters"] if p["name"] == "state"]
    assert set(state["schema"]["enum"]) == {s.value for s in JobState}
    bulk = doc["components"]["schemas"]["Bulk"]["properties"]["filters"]["properties"]
    assert set(bulk) == set(SEARCH_FIELDS)
    assert api.get(f"{V1}/jobs", params={"state": "waiting"}).status_code == 200


def test_bulk_ids_that_cannot_exist_are_skipped(api: TestClient, dash_app: Conveyor) -> None:
    """An id with NUL (PostgreSQL cannot store one) is counted and skipped, never a 500."""
    r = api.post(f"{V1}/jobs/bulk", json={"action": "cancel", "ids": ["a\u0000b", "x\u202e"]})
    assert r.status_code == 200, r.text
    assert r.json() == {"action": "cancel", "matched": 2, "done": 0, "truncated": False}


def test_openapi_documents_the_409_answers(api: TestClient, dash_app: Conveyor) -> None:
    """run-now, cancel, retry, delete and acknowledge answer 409 when the action does not apply
    (docs/monitoring.md); the document listed no 409 at all."""
    paths = api.get(f"{V1}/openapi.json").json()["paths"]
    for path, method in [
        ("/jobs/{id}/run-now", "post"),
        ("/jobs/{id}/cancel", "post"),
        ("/jobs/{id}/retry", "post"),
        ("/jobs/{id}", "delete"),
        ("/alerts/{key}/acknowledge", "post"),
    ]:
        assert "409" in paths[V1 + path][method]["responses"], path
    assert "409" not in paths[f"{V1}/queues/{{name}}/pause"]["post"]["responses"]
    job = dash_app.enqueue("add", [1, 2])
    assert api.post(f"{V1}/jobs/{job.id}/run-now").status_code == 409
