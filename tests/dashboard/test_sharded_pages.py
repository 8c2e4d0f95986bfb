"""The dashboard on a sharded queue (issue 18): one row with per-shard depth; pause and clear
reach every shard."""

from __future__ import annotations

from fastapi.testclient import TestClient

from conveyor import Conveyor


def test_queues_page_pause_and_clear_a_sharded_queue(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    dash_app.queue("events", shards=3)
    names = dash_app.runtime.shards.get("events").names  # type: ignore[union-attr]
    for i in range(6):
        dash_app.enqueue("add", [i, i], queue="events")
    html = client.get("/queues").text
    row = html.split('data-queue="events"')[1].split("</tr>")[0]
    assert 'data-shards="3"' in row and '<td class="num" data-count="pending">6</td>' in row
    depths = [int(row.split(f'data-shard="{n}">')[1].split("<")[0]) for n in names]
    assert depths == [2, 2, 2]
    assert not any(f'data-queue="{n}"' in html for n in names), "no row per shard"
    assert 'data-shards="3"' in client.get("/queues/events").text
    assert 'data-shards="3"' in client.get("/").text
    r = client.post("/queues/events/pause", data={"csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303 and set(names) <= dash_app.broker.paused_queues()
    client.post("/queues/events/resume", data={"csrf_token": token}, follow_redirects=False)
    assert not set(names) & dash_app.broker.paused_queues()
    assert 'data-waiting="6"' in client.get("/queues/events/clear").text
    r = client.post(
        "/queues/events/clear",
        data={"csrf_token": token, "confirm": "clear"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and "6%20jobs%20deleted" in r.headers["location"]
    assert dash_app.stats()["queues"]["events"]["pending"] == 0


def test_the_api_and_the_jobs_page_search_and_bulk_by_the_logical_name_reach_every_shard(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    """``GET /api/v1/jobs?queue=events``, the jobs page filtered by ``events`` and
    ``POST /api/v1/jobs/bulk`` with ``{"queue": "events"}`` see the jobs of every shard and
    those stored before the queue was sharded, not only the latter."""
    from conveyor.dashboard.api import PREFIX

    from .conftest import AUTH

    client, _ = browser_client
    ids = [dash_app.enqueue("add", [0, 0], queue="events").id]
    dash_app.queue("events", shards=3)
    ids += [dash_app.enqueue("add", [i, i], queue="events").id for i in range(6)]
    other = dash_app.enqueue("add", [1, 1], queue="emails")
    found = client.get(f"{PREFIX}/jobs", params={"queue": "events"}, headers=AUTH).json()
    assert found["total"] == 7 and {j["id"] for j in found["items"]} == set(ids)
    html = client.get("/jobs", params={"queue": "events"}).text
    assert all(f'data-job="{i}"' in html for i in ids) and f'data-job="{other.id}"' not in html
    r = client.post(
        f"{PREFIX}/jobs/bulk",
        json={"action": "cancel", "filters": {"queue": "events"}},
        headers=AUTH,
    )
    assert r.status_code == 200 and (r.json()["matched"], r.json()["done"]) == (7, 7), r.text
    assert {dash_app.get_job(i).state.value for i in ids} == {"cancelled"}
    assert other.refresh().state.value == "pending"
