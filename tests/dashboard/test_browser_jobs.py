"""Chromium (Playwright) on the job pages: bulk selection and actions with confirmation, run now,
the time zone toggle, state-aware rendering, coming back to the list, hostile data on every
page, and the whole dashboard mounted under a prefix of a real Starlette app.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Conveyor, PermanentError
from conveyor.dashboard.security import DashboardConfig
from conveyor.dashboard.server import BackgroundServer

from .conftest import PASSWORD, TOKEN, USER
from .test_browser import ARGS, CHROMIUM, SSE_OPEN, playwright_sync
from .test_browser import browser as browser
from .test_browser import live_app as live_app
from .test_browser import page as page
from .test_browser import server as server
from .test_browser import session as session
from .test_hostile_pages import BIG, SCRIPT, seg, store

pytestmark = pytest.mark.browser
MUTED = "rgb(107, 115, 133)"  # --muted in app.css
RED = "rgb(200, 49, 43)"  # --bad
XSS = "<img src=x onerror=window.__xss=1><script>window.__xss=1</script>"
assert ARGS and CHROMIUM


def accept_dialogs(page: Any) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def test_select_all_then_run_now_the_selection(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app
    ids = [app.enqueue("add", [i, 1], queue="bulkq", delay=3600).id for i in range(3)]
    page.goto(server.url + "/jobs?queue=bulkq&state=scheduled")
    selected = page.locator('button[name=bulk][value="selected:run_now"]')
    expect(selected).to_be_disabled()
    page.check("input.select-all")
    expect(page.locator("#selected-count")).to_have_text("3")
    page.uncheck(f'input[name=ids][value="{ids[2]}"]')
    expect(page.locator("#selected-count")).to_have_text("2")
    expect(selected).to_be_enabled()
    selected.click()
    expect(page.locator("#bulk-confirm h1")).to_have_text("Run now 2 jobs?")
    assert {app.get_job(i).state for i in ids} == {"scheduled"}, "nothing before confirming"
    page.click("#bulk-confirm-button")
    page.wait_for_url(re.compile(r"/jobs\?queue=bulkq&state=scheduled&flash="))
    expect(page.locator(".flash")).to_contain_text("Run now: 2 of 2 jobs changed")
    assert [app.get_job(i).state for i in ids] == ["pending", "pending", "scheduled"]
    expect(page.locator("tr[data-job]")).to_have_count(1)


def test_retry_every_dead_letter_of_a_search(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app

    @app.task(name="bulk.doomed", queue="bulkdead", max_attempts=1)
    def doomed(n: int) -> None:
        raise PermanentError(f"bad {n}")

    for i in range(4):
        doomed.enqueue(i)
    app.worker(["bulkdead"], handle_signals=False, heartbeat=False).run_until_idle()
    page.goto(server.url + "/dead?queue=bulkdead")
    expect(page.locator("#match-count")).to_have_text("4")
    page.click('button[name=bulk][value="all:retry"]')
    expect(page.locator("#bulk-confirm h1")).to_have_text("Retry 4 jobs?")
    expect(page.locator("#bulk-confirm")).to_contain_text("bulkdead")
    page.click("#bulk-confirm-button")
    page.wait_for_url(re.compile(r"/dead\?queue=bulkdead&flash="))
    expect(page.locator("#dead-table .empty")).to_be_visible()
    assert app.search(queue="bulkdead", state="pending").total == 4
    entry = [e for e in app.broker.log_read("audit", 50) if e["action"] == "jobs.bulk_retry"][-1]
    assert entry["result"] == 4 and entry["filters"]["queue"] == "bulkdead"


def test_bulk_cancel_then_delete_with_back_link(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app
    ids = [app.enqueue("add", [i, 2], queue="bulkdel", delay=600).id for i in range(2)]
    page.goto(server.url + "/jobs?queue=bulkdel")
    page.click('button[name=bulk][value="all:delete"]')
    expect(page.locator("#bulk-confirm")).to_contain_text("cannot be undone")
    page.click("#bulk-cancel")  # Back: nothing happens
    page.wait_for_url(re.compile(r"/jobs\?queue=bulkdel$"))
    assert all(app.broker.get(i) is not None for i in ids)
    page.check("input.select-all")
    page.click('button[name=bulk][value="selected:cancel"]')
    page.click("#bulk-confirm-button")
    expect(page.locator(".flash")).to_contain_text("Cancel: 2 of 2")
    page.click('button[name=bulk][value="all:delete"]')
    page.click("#bulk-confirm-button")
    expect(page.locator(".flash")).to_contain_text("Delete: 2 of 2")
    assert all(app.broker.get(i) is None for i in ids)


def test_run_now_one_job_from_its_page(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app
    job = app.enqueue("add", [5, 5], queue="later", delay=3600)
    page.goto(f"{server.url}/jobs/{job.id}")
    expect(page.locator("#job-state")).to_have_text("scheduled")
    accept_dialogs(page)
    page.click("#run-now")
    expect(page.locator("#job-state")).to_have_text("pending")
    expect(page.locator(".flash")).to_contain_text("Job made due now")
    assert app.get_job(job.id).state == "pending"
    expect(page.locator("#job-history")).to_contain_text("run_now")


def test_deleting_a_job_from_its_page_returns_to_the_list(
    page: Any, server: BackgroundServer
) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app
    job = app.enqueue("add", [1, 1], queue="gone", delay=600)
    page.goto(f"{server.url}/jobs?queue=gone")
    page.click(f'tr[data-job="{job.id}"] a')
    accept_dialogs(page)
    page.click("#job-actions .btn.danger")
    page.wait_for_url(re.compile(r"/jobs\?flash=Job"))  # never the vanished job's own page
    expect(page.locator(".flash")).to_contain_text("Job deleted")
    assert app.broker.get(job.id) is None


def test_time_zone_toggle_is_remembered(browser: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    context = browser.new_context(timezone_id="Asia/Tokyo", viewport={"width": 1360, "height": 900})
    try:
        page = context.new_page()
        page.goto(server.url + "/login")
        page.fill("input[name=username]", USER)
        page.fill("input[name=password]", PASSWORD)
        page.click("form[action='/login'] button[type=submit]")
        page.wait_for_url(server.url + "/")
        app = server.dashboard.app
        job = app.enqueue("add", [1, 2], queue="tz")
        created = app.get_job(job.id).created_at
        utc = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(created))
        tokyo = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(created + 9 * 3600))
        page.goto(server.url + "/jobs?queue=tz")
        cell = page.locator(f'tr[data-job="{job.id}"] time.ts')
        expect(cell).to_have_text(utc)
        page.click(".tz-toggle button[data-tz=local]")
        expect(cell).to_have_text(tokyo)
        expect(page.locator("th .tz-name").first).to_have_text("Asia/Tokyo")
        page.goto(f"{server.url}/jobs/{job.id}")  # remembered across pages and reloads
        expect(page.locator("dl.facts time.ts").first).to_have_text(tokyo)
        page.wait_for_function(SSE_OPEN, timeout=5000)
        app.cancel(job.id)  # a live swap brings a new <time>: it is converted too
        expect(page.locator("#job-state")).to_have_text("cancelled")
        finished = page.locator("dl.facts div:has(dt:text-is('Finished')) time.ts")
        stamp = app.get_job(job.id).finished_at
        expect(finished).to_have_text(
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp + 9 * 3600))
        )
        page.click(".tz-toggle button[data-tz=utc]")
        expect(page.locator("dl.facts time.ts").first).to_have_text(utc)
    finally:
        context.close()


def test_old_errors_of_a_completed_job_are_muted_history(
    page: Any, server: BackgroundServer
) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app
    calls: list[int] = []

    @app.task(name="shaky.browser", queue="shaky", max_attempts=3)
    def shaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first attempt failed")
        return "ok"

    job = shaky.enqueue()
    worker = app.worker(["shaky"], handle_signals=False, heartbeat=False)
    worker.run_until_idle()
    app.broker.run_now(job.id, app.now())
    worker.run_until_idle()
    assert app.get_job(job.id).state == "completed"
    page.goto(f"{server.url}/jobs/{job.id}")
    earlier = page.locator("#earlier-error dd")
    expect(earlier).to_contain_text("first attempt failed")
    expect(earlier).to_have_css("color", MUTED)  # retried: a live swap may replace the node
    expect(page.locator("#job-errors h2")).to_contain_text("Earlier errors")
    message = page.locator("#job-errors ol.errors li div.past")
    expect(message).to_have_css("color", MUTED)
    dead = app.enqueue("boom", [1], queue="shaky")
    worker.run_until_idle()
    page.goto(f"{server.url}/jobs/{dead.id}")
    expect(page.locator("#last-error")).to_have_css("color", RED)


def test_pausing_a_schedule_hides_its_next_runs(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app
    app.schedule_cron("browser-nightly", "add", "0 3 * * *", args=[1, 2])
    page.goto(server.url + "/schedules?x=1")
    row = page.locator('tr[data-schedule="browser-nightly"]')
    expect(row.locator("td.next-runs time.ts")).to_have_count(3)
    accept_dialogs(page)
    row.locator("button", has_text="Pause").click()
    page.wait_for_url(re.compile(r"/schedules\?x=1&flash="))
    expect(row.locator("td.next-runs")).to_have_text("paused — no runs until resumed")
    expect(row.locator("td.next-runs time")).to_have_count(0)
    row.locator("button", has_text="Resume").click()
    expect(row.locator("td.next-runs time.ts")).to_have_count(3)


def test_every_page_with_hostile_data_runs_no_script(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    app = server.dashboard.app

    @app.task(name="hostile.browser", queue="hostileq", max_attempts=1)
    def fail(*args: Any, **kwargs: Any) -> None:
        raise PermanentError(XSS + BIG)

    dead = fail.enqueue(XSS + BIG, {"k": XSS}, why=BIG).id
    evil = store(app, "evil-task-browser", XSS, "hostileq", BIG)
    app.worker(["hostileq"], handle_signals=False, heartbeat=False).run_until_idle()
    later = app.enqueue("add", [XSS, BIG], queue="hostileq", delay=600).id
    pages = ["/", "/jobs", "/jobs?queue=hostileq", "/dead", "/schedules", "/alerts", "/audit"]
    pages += [f"/jobs/{seg(i)}" for i in (dead, evil, later)] + ["/queues/hostileq"]
    pages += ["/jobs?text=" + SCRIPT.replace("<", "%3C").replace(">", "%3E")]
    for path in pages:
        response = page.goto(server.url + path)
        assert response is not None and response.status == 200, path
        expect(page.locator("header.top")).to_be_visible()
        assert page.evaluate("() => window.__xss") is None, path
        assert page.locator("main script, main img").count() == 0, path
    page.goto(server.url + "/jobs?queue=hostileq")
    page.check("input.select-all")
    page.click('button[name=bulk][value="selected:run_now"]')
    expect(page.locator("#bulk-confirm h1")).to_have_text("Run now 3 jobs?")
    assert page.evaluate("() => window.__xss") is None


# ---------------------------------------------------------------------- mounted under a prefix
PREFIX = "/admin/jobs"


class ParentServer:
    """A user's Starlette app (its own route + the dashboard under ``PREFIX``) on uvicorn."""

    def __init__(self, app: Conveyor) -> None:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.responses import PlainTextResponse
        from starlette.routing import Mount, Route

        from conveyor.dashboard import create_app

        config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD, live_interval=0.2)
        self.dashboard = create_app(app, config)
        parent = Starlette(
            routes=[
                Route("/", lambda request: PlainTextResponse("parent")),
                Mount(PREFIX, self.dashboard),
            ]
        )
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        cfg = uvicorn.Config(parent, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ParentServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the parent app did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.dashboard.state.dashboard.stopping.set()
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def parent(live_app: Conveyor) -> Iterator[ParentServer]:
    with ParentServer(live_app) as srv:
        yield srv


def test_mounted_under_a_prefix_styled_live_and_acting(
    browser: Any,
    parent: ParentServer,
    live_app: Conveyor,
) -> None:
    expect = playwright_sync.expect
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(parent.url + PREFIX + "/")
        page.wait_for_url(re.compile(re.escape(PREFIX) + r"/login\?next="))
        header = page.locator("header.top")
        assert header.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(22, 27, 38)"
        page.fill("input[name=username]", USER)
        page.fill("input[name=password]", PASSWORD)
        page.click(f"form[action='{PREFIX}/login'] button[type=submit]")
        page.wait_for_url(parent.url + PREFIX + "/")
        assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == (
            "rgb(245, 246, 248)"
        ), "styled: app.css loaded from under the prefix"
        page.wait_for_function(SSE_OPEN, timeout=5000)
        live_app.enqueue("add", [1, 2], queue="mounted")
        cell = page.locator('tr[data-queue="mounted"] td.depth')
        expect(cell).to_have_text("1", timeout=2000)  # live update through the prefix
        accept_dialogs(page)
        page.locator('tr[data-queue="mounted"] button', has_text="Pause").click()
        page.wait_for_url(re.compile(re.escape(PREFIX) + r"/\?flash="))
        expect(page.locator(".flash")).to_contain_text("Queue mounted paused")
        assert "mounted" in live_app.broker.paused_queues()
        page.click("header.top nav a:has-text('Jobs')")
        page.wait_for_url(parent.url + PREFIX + "/jobs")
        page.click(".tz-toggle button[data-tz=local]")  # dashboard.js loads under the prefix
        expect(page.locator(".tz-toggle button[data-tz=local]")).to_have_attribute(
            "aria-pressed", "true"
        )
        page.goto(parent.url + PREFIX + "/jobs?queue=mounted")
        page.check("input.select-all")
        page.click('button[name=bulk][value="selected:cancel"]')
        page.click("#bulk-confirm-button")
        page.wait_for_url(re.compile(re.escape(PREFIX) + r"/jobs\?queue=mounted&flash="))
        assert live_app.search(queue="mounted", state="cancelled").total == 1
        page.click("header.top .who button.link")  # log out: back to the prefixed login page
        page.wait_for_url(parent.url + PREFIX + "/login")
        live_app.resume("mounted")
    finally:
        context.close()
    assert errors == [], errors
