"""The limits page and /api/limits (issue 15): see and change flow control from a browser."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from conveyor import ConcurrencyLimit, Conveyor


def _setup(app: Conveyor) -> list[Any]:
    @app.task(name="flow.sync", concurrency=ConcurrencyLimit(1, key="account_id"))
    def sync(account_id: int, n: int) -> None: ...

    jobs = [sync.enqueue(42, n) for n in range(3)]
    app.broker.claim(["default"], app.now(), limit=5)
    app.broker.claim(["default"], app.now(), limit=5)
    return jobs


def test_limits_page_shows_and_changes_limits(
    dash_app: Conveyor, browser_client: tuple[TestClient, str]
) -> None:
    client, token = browser_client
    jobs = _setup(dash_app)
    page = client.get("/limits")
    assert page.status_code == 200
    assert "conc:flow.sync" in page.text and "1 per account_id" in page.text
    assert "waiting for account_id=42 (1 running)" in page.text
    assert 'href="/limits"' in client.get("/").text
    job_page = client.get(f"/jobs/{jobs[1].id}").text
    assert "waiting for account_id=42 (1 running)" in job_page
    r = client.post(
        "/limits/set",
        data={"csrf_token": token, "name": "conc:flow.sync", "value": "2"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    assert dash_app.limits()["limits"] == {"conc:flow.sync": [2.0]}
    r = client.post("/limits/clear", data={"csrf_token": token, "name": "conc:flow.sync"})
    assert dash_app.limits()["limits"] == {}
    assert (
        client.post("/limits/set", data={"name": "conc:flow.sync", "value": "3"}).status_code == 403
    )


def test_limits_api(dash_app: Conveyor, api: TestClient) -> None:
    _setup(dash_app)
    data = api.get("/api/limits").json()
    assert data["declared"] == {"conc:flow.sync": "1 per account_id"}
    r = api.post("/api/limits", json={"name": "conc:flow.sync", "value": 4})
    assert r.status_code == 200 and r.json()["limits"]["limits"] == {"conc:flow.sync": [4.0]}
    bad = api.post("/api/limits", json={"name": "nope", "value": 4})
    assert bad.status_code == 422 and "name" in bad.text
    r = api.post("/api/limits", json={"name": "conc:flow.sync", "value": None})
    assert r.json()["limits"]["limits"] == {}


def test_prometheus_exports_limits(dash_app: Conveyor) -> None:
    from conveyor.monitoring.prometheus import exposition

    _setup(dash_app)
    text = exposition(dash_app)[0].decode()
    assert 'conveyor_limit_running{slot="conc:flow.sync:account_id=42"} 1.0' in text
    assert 'why="waiting for account_id=42 (1 running)"' in text
