"""Every page (and the bulk confirmation) with hostile job data on every backend: scripts,
markup and 40 KB strings in arguments, errors, task and queue names are shown as bounded text,
never markup, and no page breaks.

Task and queue names that enqueue refuses are written straight through the broker (as an older
version or another client could have stored them) where the backend stores them; Redis refuses
an illegal queue name (it becomes a key's hash tag), so there the queue is the longest legal one.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor, PermanentError
from conveyor.task import JobSpec
from tests.support.hostile import HOSTILE_TEXT

SCRIPT = HOSTILE_TEXT["markup"]
BIG = (SCRIPT + " [/] ") * (40_000 // len(SCRIPT + " [/] ") + 1)  # a 40 KB string
MAX_PAGE = 600_000  # bytes: 40 KB values are truncated, so no page grows with them
STATIC_SCRIPTS = re.compile(r'<script src="[^"]*/static/[\w.-]+\.js"( defer)?></script>')


def seg(value: str) -> str:
    return quote(value, safe="")


def store(app: Conveyor, job_id: str, task: str, queue: str, *args: Any, **kwargs: Any) -> str:
    """A job with any task and queue name, stored through the broker."""
    now = app.now()
    job = app.build_job(JobSpec("add", tuple(args), kwargs, {"metadata": {"note": BIG}}), now)
    app.broker.enqueue([dataclasses.replace(job, id=job_id, task=task, queue=queue)], now)
    return job_id


def hostile_world(app: Conveyor, backend: str) -> dict[str, str]:
    """Jobs in every state with hostile args, errors, task and queue names; returns name -> id."""

    @app.task(name="hostile.fail", max_attempts=1)
    def fail(*args: Any, **kwargs: Any) -> None:
        raise PermanentError(BIG)

    evil_queue = "q" * 100 if backend == "redis" else "<b>q</b><script>alert(1)</script>"
    ids = {
        "dead": fail.enqueue(BIG, {"k": BIG}, why=BIG).id,
        "scheduled": app.enqueue("add", [BIG, SCRIPT], delay=600, metadata={"n": BIG}).id,
        "evil_task": store(app, "evil-task", SCRIPT, "default", BIG),
        "evil_queue": store(app, "evil-queue", "add", evil_queue, BIG),
    }
    app.worker().run_until_idle()
    app.schedule_cron("nightly", "add", "0 3 * * *", args=[BIG])
    app.pause("default")
    return ids


def check_page(html: str, where: str) -> None:
    assert len(html.encode()) < MAX_PAGE, (where, len(html))
    bare = STATIC_SCRIPTS.sub("", html)
    assert "<script" not in bare and "<img src=x" not in bare and "<b>q</b>" not in bare, where
    assert html.rstrip().endswith("</html>"), where
    for tag in ("table", "tr", "div", "pre", "details", "form", "section"):
        opened = len(re.findall(f"<{tag}[ >]", html))
        assert opened == len(re.findall(f"</{tag}>", html)), (where, tag)


@pytest.mark.parametrize("mounted", [False, True], ids=["root", "prefix"])
def test_every_page_survives_hostile_data(
    browser_client: tuple[TestClient, str], dash_app: Conveyor, backend: str, mounted: bool
) -> None:
    client, token = browser_client
    ids = hostile_world(dash_app, backend)
    if mounted:  # the same data through a dashboard mounted under a prefix
        from conveyor.dashboard import DashboardConfig

        from .conftest import PASSWORD, TOKEN, USER
        from .test_mount import PREFIX, log_in, parent_app

        config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD)
        client = TestClient(parent_app(dash_app, config), base_url="http://127.0.0.1")
        token, base = log_in(client), PREFIX
    else:
        base = ""
    queues = dash_app.broker.queues()
    pages = ["/", "/jobs", "/dead", "/schedules", "/alerts", "/audit", "/jobs?state=scheduled"]
    pages += [f"/jobs/{seg(i)}" for i in ids.values()]
    pages += [f"/queues/{seg(q)}" for q in queues]
    pages += ["/jobs?text=" + quote(SCRIPT), "/dead?error=" + quote(SCRIPT)]
    for path in pages:
        r = client.get(base + path)
        # a queue name enqueue refuses has no page: a clear 422 page naming the rule
        illegal = path.startswith("/queues/%3C") and r.status_code == 422
        assert r.status_code == 200 or illegal, (path, r.status_code)
        check_page(r.text, path)
    detail = client.get(f"{base}/jobs/{ids['dead']}").text
    assert "&lt;script&gt;alert(" in detail and "more characters not shown" in detail
    form = {"csrf_token": token, "bulk": "all:retry", "text": SCRIPT, "next": base + "/jobs"}
    confirm = client.post(base + "/jobs/bulk", data=form)
    assert confirm.status_code == 200
    check_page(confirm.text, "bulk confirmation")
    assert "&lt;script&gt;" in confirm.text
    r = client.post(base + "/jobs/bulk", data={**form, "confirm": "yes"}, follow_redirects=False)
    assert r.status_code == 303
    audit = client.get(base + "/audit")
    check_page(audit.text, "audit after a hostile bulk action")
    assert "jobs.bulk_retry" in audit.text
