"""Hostile data on the workers, queues and history pages, on every backend: scripts, markup,
40 KB strings in job arguments, errors, task and queue names, worker ids and host names are
shown as bounded text, every link stays one path segment, and actions hit only their target.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any
from urllib.parse import quote

from starlette.testclient import TestClient

from conveyor import Conveyor, PermanentError
from conveyor.errors import ValidationError
from conveyor.task import JobSpec
from conveyor.worker import control
from conveyor.worker.presence import COLLECTION
from tests.support.hostile import HOSTILE_TEXT, store_unvalidated

HUGE = "y" * 40_000 + '<script>alert("huge")</script>'
TEXTS = {**HOSTILE_TEXT, "huge": HUGE}
PAGES = ["/workers", "/queues", "/history", "/history?range=24h", "/history?range=7d"]
FRAGMENTS = ["/fragments/workers", "/fragments/queues", "/fragments/history?range=1h"]
MAX_PAGE = 400_000  # bytes: a 40 KB value is cut, never repeated in full


def attr_urls(html: str) -> list[str]:
    """Every href / action / hx-post / hx-get value of a page (entities decoded)."""
    found = re.findall(r'(?:href|action|hx-post|hx-get)="([^"]*)"', html)
    return [u.replace("&amp;", "&").replace("&#34;", '"').replace("&#39;", "'") for u in found]


def hostile_workers(app: Conveyor) -> dict[str, str]:
    """One worker record per hostile text (as id, host, queues, running job ids and tasks)."""
    now, ids = app.now(), {}
    for name, text in TEXTS.items():
        wid = f"w-{name}-{text[:200]}"
        doc: dict[str, Any] = {
            "id": wid,
            "host": text,
            "pid": 7,
            "queues": [text, "default"],
            "weights": {text: 3},
            "concurrency": 2,
            "running": [text],
            "jobs": [{"id": text, "task": text, "queue": text, "started_at": now - 5}],
            "started_at": now,
            "state": text,
            "heartbeat_at": now,
        }
        app.broker.docs.put(COLLECTION, wid, doc, now, ttl=60)
        ids[name] = wid
    return ids


def hostile_jobs(app: Conveyor) -> None:
    """Jobs with hostile arguments, errors and task names, and queues named with hostile text."""

    @app.task(name="hostile.fail", max_attempts=1)
    def fail(*args: Any, **kwargs: Any) -> None:
        raise PermanentError(str(kwargs.get("why", "")))

    for name, text in TEXTS.items():
        store_unvalidated(app, f"job-{name}", "hostile.fail", text, kwargs={"why": text})
    app.worker().run_until_idle()
    now = app.now()
    for name, text in HOSTILE_TEXT.items():  # task and queue names enqueue refuses: raw writes
        job = app.build_job(JobSpec("add", (text,), {}, {}), now)
        app.broker.enqueue([dataclasses.replace(job, id=f"t-{name}", task=text[:200])], now)
        with contextlib.suppress(ValidationError):  # Redis refuses them (key hash tags)
            app.broker.enqueue([dataclasses.replace(job, id=f"q-{name}", queue=text[:100])], now)


def check_page(html: str, page: str) -> None:
    assert "<script>alert" not in html and "<img src=x" not in html, page
    assert len(html.encode()) < MAX_PAGE, (page, len(html))
    for url in attr_urls(html):  # a query string may hold "/": only the path must not
        assert "/../" not in url.split("?")[0] and "\n" not in url, (page, url)


def test_every_new_page_survives_hostile_data(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    hostile_workers(dash_app)
    hostile_jobs(dash_app)
    for page in PAGES + FRAGMENTS:
        r = client.get(page)
        assert r.status_code == 200, (page, r.text[:300])
        check_page(r.text, page)
    workers = client.get("/workers").text
    assert "&lt;script&gt;alert" in workers, "markup is shown as text"
    assert f"/workers/{quote('w-path_traversal-zz/../../jobs/victim-1', safe='')}/quiet" in (
        attr_urls(workers)
    )
    if HOSTILE_TEXT["markup"][:100] in dash_app.broker.queues():  # not on Redis (refused)
        assert "&lt;script&gt;alert" in client.get("/queues").text
    # a hostile queue name is one segment; its clear page answers a clear error, not a crash
    for name, text in HOSTILE_TEXT.items():
        r = client.get(f"/queues/{quote(text[:100], safe='')}/clear")
        assert r.status_code in (200, 422), (name, r.status_code)
        check_page(r.text, name)
    r = client.get("/history?queue=" + quote(HOSTILE_TEXT["markup"]))
    assert r.status_code == 422 and "<script>alert" not in r.text


def test_actions_on_hostile_workers_hit_only_their_target(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    ids = hostile_workers(dash_app)
    target = ids["path_traversal"]
    r = client.post(
        f"/workers/{quote(target, safe='')}/stop",
        data={"csrf_token": token},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text[:300]
    now = dash_app.now()
    assert control.read(dash_app.broker, target, now) == "stop"
    assert [k for k, wid in ids.items() if control.read(dash_app.broker, wid, now)] == [
        "path_traversal"
    ]
    r = client.post(
        f"/workers/{quote(ids['huge'], safe='')}/quiet",
        data={"csrf_token": token},
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert control.read(dash_app.broker, ids["huge"], now) == "quiet"
    assert "<script>" not in client.get("/audit").text
