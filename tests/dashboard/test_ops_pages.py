"""The workers, queues and history pages and their actions (quiet, stop, clear) on every
backend, through the real app with a session cookie and CSRF token; every action audited."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from conveyor import Conveyor, JobState
from conveyor.monitoring.metrics import flush_local
from conveyor.worker import control
from conveyor.worker.presence import COLLECTION

from .conftest import make_client


def fake_worker(app: Conveyor, worker_id: str = "host-a:4242:abc", **extra: Any) -> str:
    """A worker registry record as a running worker's heartbeat writes it."""
    now = app.now()
    doc = {
        "id": worker_id,
        "host": "host-a",
        "pid": 4242,
        "queues": ["default", "emails"],
        "weights": {"default": 5, "emails": 1},
        "concurrency": 4,
        "running": ["job-1"],
        "jobs": [{"id": "job-1", "task": "add", "queue": "default", "started_at": now - 120}],
        "started_at": now - 3600,
        "processed": 12,
        "failed": 1,
        "state": "running",
        "heartbeat_at": now,
        **extra,
    }
    app.broker.docs.put(COLLECTION, worker_id, doc, now, ttl=60)
    return worker_id


def audit_actions(app: Conveyor) -> list[tuple[str, str]]:
    return [(e["action"], e["target"]) for e in app.broker.logs.read("audit", 50)]


def test_workers_page_lists_processes_and_running_jobs(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    assert client.get("/workers").status_code == 200
    assert "No live workers" in client.get("/workers").text
    fake_worker(dash_app)
    html = client.get("/workers").text
    for text in ("host-a:4242:abc", "pid 4242", "default, emails", "/jobs/job-1", "add"):
        assert text in html, text
    assert "running 2m" in html, "the running job's runtime"
    assert 'data-action="quiet"' in html and 'data-action="stop"' in html
    assert 'href="/workers" class="active"' in html
    assert client.get("/fragments/workers").text.count('data-worker="host-a:4242:abc"') == 1


def test_quiet_and_stop_set_the_control_flag_and_are_audited(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    wid = fake_worker(dash_app, "host-a:1:x")
    r = client.post(f"/workers/{wid}/quiet", data={"csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/workers?flash=")
    assert control.read(dash_app.broker, wid, dash_app.now()) == "quiet"
    html = client.get("/workers").text
    assert "asked: quiet" in html and 'data-action="quiet"' not in html
    r = client.post(f"/workers/{wid}/stop", data={"csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303
    assert control.read(dash_app.broker, wid, dash_app.now()) == "stop"
    assert ("worker.stop", wid) in audit_actions(dash_app)
    assert ("worker.quiet", wid) in audit_actions(dash_app)
    # no CSRF token: refused; an unknown worker: a clear error, nothing stored
    assert client.post(f"/workers/{wid}/stop", data={}).status_code == 403
    r = client.post("/workers/nobody/quiet", data={"csrf_token": token})
    assert r.status_code == 422 and "no live worker" in r.text
    assert control.read(dash_app.broker, "nobody", dash_app.now()) is None


def test_a_worker_with_several_processes_is_stopped_whole_or_one_process(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    """Rows of one ``conveyor worker --processes 2`` offer "Stop all 2" (the group's flag:
    every child, restarted ones too) and "Stop this process" (``scope=process``)."""
    client, token = browser_client
    group = 'host-a:77:<b>"x"</b>'
    first = fake_worker(dash_app, "host-a:78:a", group=group, processes=2)
    second = fake_worker(dash_app, "host-a:79:b", group=group, processes=2)
    html = client.get("/workers").text
    assert "Stop all 2" in html and "Quiet all 2" in html and "1 of 2 processes" in html
    assert 'data-action="stop-process"' in html and '<b>"x"' not in html
    now = dash_app.now()
    r = client.post(f"/workers/{first}/stop", data={"csrf_token": token, "scope": "process"})
    assert r.status_code == 200
    assert control.read(dash_app.broker, first, now) == "stop"
    assert control.read(dash_app.broker, control.group_key(group), now) is None
    r = client.post(f"/workers/{second}/stop", data={"csrf_token": token})
    assert r.status_code == 200
    assert control.read(dash_app.broker, control.group_key(group), now) == "stop"
    assert client.get("/workers").text.count("asked: stop") == 2
    entry = dash_app.broker.logs.read("audit", 1)[0]
    assert entry["processes"] == sorted([first, second]) and entry["group"] == group
    r = client.post(f"/workers/{second}/quiet", data={"csrf_token": token, "scope": "bad"})
    assert r.status_code == 422 and "scope" in r.text


def test_queues_page_shows_depth_latency_rates_and_limits(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    for _ in range(3):
        dash_app.enqueue("add", [1, 2])
    dash_app.worker().run_until_idle()
    dash_app.enqueue("add", [1, 2])
    dash_app.enqueue("add", [1, 2], delay=600)
    dash_app.enqueue("boom")
    dash_app.worker().run_until_idle()
    dash_app.enqueue("add", [1, 2])
    dash_app.pause("emails")
    fake_worker(dash_app)
    flush_local(dash_app)
    html = client.get("/queues").text
    assert 'data-queue="default"' in html and 'data-queue="emails"' in html
    row = html.split('data-queue="default"')[1].split("</tr>")[0]
    assert '<td class="num" data-count="pending">1</td>' in row
    assert '<td class="num" data-count="scheduled">1</td>' in row
    assert 'data-count="dead"><a href="/dead?queue=default">1</a>' in row
    assert '<td class="num">1.0</td>' in row, "5 processed in the 5-minute window: 1 a minute"
    assert '<td class="num bad">0.2</td>' in row, "1 failed in 5 minutes"
    assert ">5<" in row, "the weight a live worker gives the queue"
    assert "data-limit>none<" in row
    assert 'href="/queues/default/clear"' in row
    emails = html.split('data-queue="emails"')[1].split("</tr>")[0]
    assert "paused" in emails and 'data-action="resume"' in emails
    assert client.get("/fragments/queues").status_code == 200


def test_clear_a_queue_after_confirmation(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    running = dash_app.enqueue("add", [0, 0], priority=-1)
    dash_app.broker.claim(["default"], dash_app.now(), limit=1, visibility_timeout=600)
    waiting = [dash_app.enqueue("add", [i, i]) for i in range(4)]
    dash_app.enqueue("add", [9, 9], delay=60)
    other = dash_app.enqueue("emails.send", ["a@b"])
    confirm = client.get("/queues/default/clear").text
    assert 'data-waiting="5"' in confirm and "4 pending, 1 scheduled and 0 retrying" in confirm
    assert "1 running jobs are not touched" in confirm
    r = client.post("/queues/default/clear", data={"csrf_token": token})
    assert r.status_code == 422 and "confirm" in r.text, "the confirmation step is required"
    assert dash_app.broker.get(waiting[0].id) is not None
    r = client.post(
        "/queues/default/clear",
        data={"csrf_token": token, "confirm": "clear"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and "5%20jobs%20deleted" in r.headers["location"]
    assert all(dash_app.broker.get(h.id) is None for h in waiting)
    assert dash_app.broker.get(running.id).state is JobState.ACTIVE
    assert dash_app.broker.get(other.id).state is JobState.PENDING
    entry = dash_app.broker.logs.read("audit", 1)[0]
    assert (entry["action"], entry["target"], entry["deleted"]) == ("queue.clear", "default", 5)
    assert client.get("/queues/nosuchqueue/clear").status_code == 422
    assert "Nothing to clear" in client.get("/queues/default/clear").text


def test_read_only_dashboard_refuses_the_new_actions(dash_app: Conveyor) -> None:
    wid = fake_worker(dash_app)
    dash_app.enqueue("add", [1, 2])
    with make_client(dash_app, read_only=True) as client:
        client.headers.update({"Authorization": "Bearer test-token-0123456789abcdef"})
        assert 'data-action="quiet"' not in client.get("/workers").text
        assert client.post(f"/workers/{wid}/stop").status_code == 403
        assert client.post("/queues/default/clear", data={"confirm": "clear"}).status_code == 403
    assert control.read(dash_app.broker, wid, dash_app.now()) is None
    assert dash_app.broker.counts()["default"]["pending"] == 1


def test_history_page_and_charts_have_axes_and_a_legend(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    for _ in range(3):
        dash_app.enqueue("add", [1, 2])
    dash_app.enqueue("boom")
    dash_app.worker().run_until_idle()
    for rng in ("1h", "24h", "7d"):
        html = client.get(f"/history?range={rng}").text
        assert "processed (4)" in html and "failed (1)" in html, rng
        assert 'class="tick x"' in html and 'class="tick y"' in html, rng
        assert 'class="axis"' in html and "times in UTC" in html, rng
    assert "<polyline" in client.get("/history?range=24h").text, "a day of minutes: lines"
    assert "per hour" in client.get("/history?range=7d").text
    emails = client.get("/history?range=1h&queue=emails").text
    assert "processed (0)" in emails
    assert client.get("/history?range=1y").status_code == 422
    assert client.get("/history?queue=a%2Fb").status_code == 422
    fragment = client.get("/fragments/history?range=1h").text
    assert "processed (4)" in fragment and "<html" not in fragment
    overview = client.get("/").text
    assert 'hx-get="/fragments/history?range=1h"' in overview
    queue_page = client.get("/queues/default").text
    assert 'class="tick x"' in queue_page and 'class="legend"' in queue_page
