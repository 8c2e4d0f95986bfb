"""The dashboard in a real browser: Playwright driving Debian's chromium against uvicorn.

The app is a SQLite file with the system clock; the server runs in a thread on 127.0.0.1 with a
free port. Run only these with ``pytest -m browser``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Conveyor
from conveyor.dashboard.security import DashboardConfig
from conveyor.dashboard.server import BackgroundServer
from tests.support.hostile import HOSTILE_TEXT, store_unvalidated

from .conftest import AUTH, PASSWORD, TOKEN, USER, register_tasks

pytestmark = pytest.mark.browser
playwright_sync = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SSE_OPEN = """() => { const el = document.querySelector('[sse-connect]');
  const d = el && el['htmx-internal-data'];
  return !!(d && d.sseEventSource && d.sseEventSource.readyState === 1); }"""


class Flaky:
    """Fails while ``broken`` is set: dead-letters first, then succeeds after a retry."""

    broken = threading.Event()


@pytest.fixture(scope="module")
def live_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Conveyor]:
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed")
    app = Conveyor(f"sqlite:///{tmp_path_factory.mktemp('browser') / 'jobs.db'}")
    register_tasks(app)

    @app.task(name="flaky", queue="retry", max_attempts=1)
    def flaky(n: int) -> int:
        if Flaky.broken.is_set():
            raise RuntimeError("downstream unavailable")
        return n * 2

    yield app
    app.close()


@pytest.fixture(scope="module")
def server(live_app: Conveyor) -> Iterator[BackgroundServer]:
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD, live_interval=0.2)
    srv = BackgroundServer(live_app, "127.0.0.1", 0, config).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Expectations poll the page; their 5 s default is no requirement, and CI shares two cores
    # with redis, PostgreSQL and chromium: 15 s. A latency requirement passes its own timeout.
    playwright_sync.expect.set_options(timeout=15_000)
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def login(browser: Any, url: str) -> Any:
    """A fresh context logged in through the form; returns its page."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.goto(url + "/")
    assert "/login" in page.url
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(url + "/")
    return page


@pytest.fixture(scope="module")
def session(browser: Any, server: BackgroundServer) -> Iterator[Any]:
    """One logged-in browser context shared by the tests (a context costs ~1 s here)."""
    first = login(browser, server.url)
    yield first.context
    first.context.close()


@pytest.fixture
def page(session: Any) -> Iterator[Any]:
    """A new tab of the logged-in session; fails the test on any console error (CSP, JS)."""
    p = session.new_page()
    errors: list[str] = []
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    yield p
    p.close()
    assert not [e for e in errors if "403" not in e], errors


def api_post(server: BackgroundServer, path: str, body: dict[str, Any] | None = None) -> Any:
    r = httpx.post(server.url + path, json=body or {}, headers=AUTH, timeout=10)
    assert r.status_code < 300, r.text
    return r.json()


def test_queue_depth_changes_live_within_one_second(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    page.goto(server.url + "/")
    page.wait_for_function(SSE_OPEN, timeout=5000)
    cell = page.locator('tr[data-queue="live"] td.depth')
    for expected in ("1", "2"):
        api_post(server, "/api/v1/jobs", {"task": "add", "args": [1, 2], "queue": "live"})
        started = time.monotonic()
        expect(cell).to_have_text(expected, timeout=1000)
        assert time.monotonic() - started < 1.0


def test_open_a_job_detail_with_escaped_arguments(page: Any, server: BackgroundServer) -> None:
    expect = playwright_sync.expect
    evil = "<img src=x onerror=window.__xss=1><script>window.__xss=1</script>"
    job = api_post(server, "/api/v1/jobs", {"task": "add", "args": [evil, 2], "queue": "detail"})
    page.goto(server.url + "/jobs?queue=detail")
    page.click(f'tr[data-job="{job["id"]}"] a')
    page.wait_for_url(re.compile(r"/jobs/" + job["id"]))
    expect(page.locator("#job-state")).to_have_text("pending")
    expect(page.locator("#job-args")).to_contain_text("<script>window.__xss=1</script>")
    assert page.evaluate("() => window.__xss") is None
    assert page.locator("#job-args script").count() == 0


def test_retry_a_dead_letter_from_the_ui_and_see_it_complete(
    page: Any, server: BackgroundServer, live_app: Conveyor
) -> None:
    expect = playwright_sync.expect
    Flaky.broken.set()
    job = live_app.enqueue("flaky", [21])
    live_app.worker(["retry"], handle_signals=False, heartbeat=False).run_until_idle()
    assert live_app.get_job(job.id).state == "dead_letter"
    Flaky.broken.clear()
    worker = live_app.worker(["retry"], concurrency=2, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        page.goto(server.url + "/dead?queue=retry")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click(f'tr[data-job="{job.id}"] button.retry')
        # issue 20: retrying from the dead-letter list keeps you on the list (with its filters)
        page.wait_for_url(re.compile(r"/dead\?queue=retry&flash=Job"))
        expect(page.locator(".flash")).to_contain_text("Job requeued")
        expect(page.locator(f'tr[data-job="{job.id}"]')).to_have_count(0)
        page.goto(f"{server.url}/jobs/{job.id}")
        expect(page.locator("#job-state")).to_have_text("completed", timeout=10_000)
        expect(page.locator("#job-history")).to_contain_text("requeued")
        assert live_app.get_job(job.id).result == 42
    finally:
        worker.stop(timeout=5)
        thread.join(10)
    audit = live_app.broker.log_read("audit", 20)
    assert any(e["action"] == "job.retry" and e["actor"] == USER for e in audit)


def test_delete_a_dead_letter_whose_id_climbs_out_of_its_path(
    page: Any, server: BackgroundServer, live_app: Conveyor
) -> None:
    """The id ``zz/../../jobs/victim-1`` once made the delete button delete ``victim-1``."""
    expect = playwright_sync.expect
    hostile = HOSTILE_TEXT["path_traversal"]
    victim = hostile.rsplit("/", 1)[1]
    live_app.enqueue("add", [1, 2], queue="hostile", job_id=victim)
    store_unvalidated(live_app, hostile, "boom", hostile, queue="hostile")  # enqueue refuses '/'
    live_app.worker(["hostile"], handle_signals=False, heartbeat=False).run_until_idle()
    assert live_app.get_job(hostile).state == "dead_letter"
    assert live_app.get_job(victim).state == "completed"
    page.goto(server.url + "/dead?queue=hostile")
    page.click(f'tr[data-job="{hostile}"] a')
    page.wait_for_url(re.compile(r"/jobs/zz%2F\.\.%2F\.\.%2Fjobs%2Fvictim-1$"))
    expect(page.locator("#job-state")).to_have_text("dead_letter")
    page.wait_for_function(SSE_OPEN, timeout=5000)  # /live/job/<one segment> streams
    page.goto(server.url + "/dead?queue=hostile")
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.click(f'tr[data-job="{hostile}"] button.delete')
    assert posted.value.status == 204
    assert "/jobs/zz%2F..%2F..%2Fjobs%2Fvictim-1/delete" in posted.value.url
    page.wait_for_url(re.compile(r"/dead"))
    expect(page.locator(f'tr[data-job="{hostile}"]')).to_have_count(0)
    assert live_app.broker.get(hostile) is None
    assert live_app.get_job(victim).state == "completed"


def test_request_without_csrf_token_is_refused(
    page: Any, server: BackgroundServer, live_app: Conveyor
) -> None:
    page.goto(server.url + "/audit")
    status = page.evaluate(
        "async () => (await fetch('/queues/csrfq/pause', {method: 'POST'})).status"
    )
    assert status == 403
    assert "csrfq" not in live_app.broker.paused_queues()
    token = page.get_attribute("body", "hx-headers")
    status = page.evaluate(
        """async (headers) => (await fetch('/queues/csrfq/pause',
        {method: 'POST', headers: JSON.parse(headers)})).status""",
        token,
    )
    assert status == 200 and "csrfq" in live_app.broker.paused_queues()
    live_app.resume("csrfq")


def test_unauthenticated_requests_are_refused(browser: Any, server: BackgroundServer) -> None:
    context = browser.new_context()
    try:
        assert context.request.get(server.url + "/api/v1/overview").status == 401
        assert context.request.post(server.url + "/api/v1/queues/x/pause").status == 401
        assert context.request.get(server.url + "/metrics").status == 401
        page = context.new_page()
        page.goto(server.url + "/dead")
        assert page.url.startswith(server.url + "/login")
    finally:
        context.close()


def test_screenshots_of_the_main_pages(browser: Any, tmp_path: Path) -> None:
    """Screenshots for the docs: set CONVEYOR_SCREENSHOTS=1 to write them to docs/images/."""
    from .showcase import populate

    target = Path(__file__).parents[2] / "docs" / "images"
    if os.environ.get("CONVEYOR_SCREENSHOTS") != "1":
        target = tmp_path / "images"
    target.mkdir(parents=True, exist_ok=True)
    app = Conveyor(f"sqlite:///{tmp_path / 'showcase.db'}")
    register_tasks(app)
    stop = populate(app)
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD, live_interval=0.2)
    srv = BackgroundServer(app, "127.0.0.1", 0, config).start()
    try:
        login_page = browser.new_page(viewport={"width": 1100, "height": 640})
        login_page.goto(srv.url + "/login")
        login_page.screenshot(path=str(target / "dashboard-login.png"))
        login_page.close()
        page = login(browser, srv.url)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        dead = app.dead_letters(queue="reports", limit=1)[0].id
        shots = {
            "overview": "/",
            "queue": "/queues/emails",
            "jobs": "/jobs",
            "job": f"/jobs/{dead}",
            "dead-letters": "/dead",
            "schedules": "/schedules",
            "alerts": "/alerts",
        }
        for name, path in shots.items():
            page.goto(srv.url + path)
            if name == "overview":
                page.wait_for_function(SSE_OPEN, timeout=5000)
                page.wait_for_timeout(500)
            if name == "job":
                page.click("#job-history details summary")
            page.screenshot(
                path=str(target / f"dashboard-{name}.png"), full_page=name in ("overview", "job")
            )
        page.context.close()
        assert errors == []  # no CSP violation or script error on any page
    finally:
        srv.stop()
        stop()
        app.close()
    assert all((target / f"dashboard-{n}.png").stat().st_size > 10_000 for n in shots)
