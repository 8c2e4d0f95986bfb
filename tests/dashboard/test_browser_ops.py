"""The workers, queues and history pages in a real browser (Playwright + chromium): quiet and
stop a running worker, pause / resume / clear a queue with its confirmation step, and the
history charts with axes and legend (the overview loads its chart with htmx).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.config import Settings
from conveyor.dashboard.security import DashboardConfig
from conveyor.dashboard.server import BackgroundServer
from conveyor.monitoring.metrics import flush_local

from .conftest import PASSWORD, TOKEN, USER, register_tasks
from .test_browser import CHROMIUM, browser, login  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.browser
playwright_sync = pytest.importorskip("playwright.sync_api")
GATE = threading.Event()


@pytest.fixture(scope="module")
def ops_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Conveyor]:
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed")
    db = tmp_path_factory.mktemp("browser-ops") / "jobs.db"
    app = Conveyor(f"sqlite:///{db}", settings=Settings(heartbeat_interval=0.3))
    register_tasks(app)

    @app.task(name="held", queue="busy")
    def held(n: int) -> int:
        GATE.wait(30)
        return n

    yield app
    GATE.set()
    app.close()


@pytest.fixture(scope="module")
def ops_server(ops_app: Conveyor) -> Iterator[BackgroundServer]:
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD, live_interval=0.2)
    srv = BackgroundServer(ops_app, "127.0.0.1", 0, config).start()
    yield srv
    srv.stop()


@pytest.fixture
def page(browser: Any, ops_server: BackgroundServer) -> Iterator[Any]:  # noqa: F811
    """A logged-in page; fails the test on any console error (CSP, JS)."""
    p = login(browser, ops_server.url)
    errors: list[str] = []
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    yield p
    p.context.close()
    assert not errors, errors


def test_quiet_then_stop_a_running_worker(
    page: Any, ops_server: BackgroundServer, ops_app: Conveyor
) -> None:
    expect = playwright_sync.expect
    GATE.clear()
    first = ops_app.enqueue("held", [1])
    worker = ops_app.worker(["busy"], concurrency=2, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        page.goto(ops_server.url + "/workers")
        row = page.locator(f'tr[data-worker="{worker.id}"]')
        expect(row).to_be_visible(timeout=10_000)
        expect(row.locator("ul.running-jobs")).to_contain_text(first.id, timeout=10_000)
        expect(row.locator("ul.running-jobs")).to_contain_text("held")
        row.locator('button[data-action="quiet"]').click()
        page.wait_for_url(re.compile(r"/workers\?flash="))
        expect(page.locator(".flash")).to_contain_text("quiet")
        expect(row.locator("[data-state]")).to_have_text("quiet", timeout=10_000)
        late = ops_app.enqueue("held", [2])
        GATE.set()
        expect(row.locator("ul.running-jobs")).to_have_count(0, timeout=10_000)
        assert ops_app.get_job(first.id).state is JobState.COMPLETED
        assert ops_app.get_job(late.id).state is JobState.PENDING, "quiet: nothing new claimed"
        page.once("dialog", lambda dialog: dialog.accept())
        row.locator('button[data-action="stop"]').click()
        # the form's POST and redirect must land before the goto below, or the goto is
        # "interrupted by another navigation" (the worker can stop first on a loaded machine)
        expect(page.locator(".flash")).to_contain_text("asked to stop")
        thread.join(10)
        assert not thread.is_alive(), "the worker stopped on the dashboard's command"
        page.goto(ops_server.url + "/workers")
        expect(page.locator(f'tr[data-worker="{worker.id}"]')).to_have_count(0)
    finally:
        GATE.set()
        worker.stop(timeout=2)
        thread.join(10)
    actions = [e["action"] for e in ops_app.broker.logs.read("audit", 50)]
    assert "worker.quiet" in actions and "worker.stop" in actions


def test_pause_resume_and_clear_a_queue(
    page: Any, ops_server: BackgroundServer, ops_app: Conveyor
) -> None:
    expect = playwright_sync.expect
    for i in range(4):
        ops_app.enqueue("add", [i, i], queue="clearme")
    ops_app.enqueue("add", [9, 9], queue="clearme", delay=3600)
    page.goto(ops_server.url + "/queues")
    row = page.locator('tr[data-queue="clearme"]')
    expect(row.locator('[data-count="pending"]')).to_have_text("4")
    expect(row.locator('[data-count="scheduled"]')).to_have_text("1")
    expect(row.locator("[data-limit]")).to_have_text("none")
    row.locator('button[data-action="pause"]').click()
    page.wait_for_url(re.compile(r"/queues\?flash="))
    expect(row.locator(".badge.paused")).to_be_visible()
    assert "clearme" in ops_app.broker.paused_queues()
    row.locator('button[data-action="resume"]').click()
    page.wait_for_url(re.compile(r"/queues\?flash=.*resumed"))
    assert "clearme" not in ops_app.broker.paused_queues()
    row.locator('a[data-action="clear"]').click()
    page.wait_for_url(re.compile(r"/queues/clearme/clear$"))
    expect(page.locator("#clear-count")).to_contain_text("5")
    expect(page.locator("#clear-count")).to_contain_text("4 pending, 1 scheduled")
    page.locator('button[data-action="confirm-clear"]').click()
    page.wait_for_url(re.compile(r"/queues\?flash="))
    expect(page.locator(".flash")).to_contain_text("5 jobs deleted")
    expect(row.locator('[data-count="pending"]')).to_have_text("0")
    assert ops_app.broker.counts()["clearme"]["pending"] == 0
    entry = ops_app.broker.logs.read("audit", 1)[0]
    assert (entry["action"], entry["deleted"], entry["actor"]) == ("queue.clear", 5, USER)


def test_history_charts_with_axes_and_legend(
    page: Any, ops_server: BackgroundServer, ops_app: Conveyor
) -> None:
    expect = playwright_sync.expect
    for i in range(3):
        ops_app.enqueue("add", [i, i])
    ops_app.enqueue("boom")
    ops_app.worker(handle_signals=False, heartbeat=False).run_until_idle()
    flush_local(ops_app)
    page.goto(ops_server.url + "/")
    chart = page.locator("#overview-history svg.chart")
    expect(chart).to_be_visible(timeout=5000)  # loaded by htmx
    assert page.locator("#overview-history text.tick.x").count() >= 2
    assert page.locator("#overview-history text.tick.y").count() >= 2
    expect(page.locator("#overview-history figcaption.legend")).to_contain_text("processed")
    expect(page.locator("#overview-history figcaption.legend")).to_contain_text("failed (1)")
    page.click("a[href='/history']")
    page.wait_for_url(re.compile(r"/history$"))
    for label in ("24h", "7d", "1h"):
        page.click(f".ranges a:text-is('{label}')")
        page.wait_for_url(re.compile(rf"range={label}"))
        expect(page.locator("svg.chart")).to_be_visible()
        expect(page.locator("figcaption.legend")).to_contain_text("failed (1)")
        assert page.locator("svg.chart text.tick.x").count() >= 2
    expect(page.locator(".ranges a.active")).to_have_text("1h")


def test_chart_time_labels_follow_the_time_zone_toggle(
    browser: Any,  # noqa: F811
    ops_server: BackgroundServer,
    ops_app: Conveyor,
) -> None:
    """The history chart's time axis, bar titles and legend switch to the browser's zone with
    the Local toggle (they stayed UTC), and back."""
    expect = playwright_sync.expect
    ops_app.enqueue("add", [1, 1])
    ops_app.worker(handle_signals=False, heartbeat=False).run_until_idle()
    flush_local(ops_app)
    context = browser.new_context(timezone_id="Asia/Tokyo", viewport={"width": 1360, "height": 900})
    try:
        page = context.new_page()
        page.goto(ops_server.url + "/login")
        page.fill("input[name=username]", USER)
        page.fill("input[name=password]", PASSWORD)
        page.click("form[action='/login'] button[type=submit]")
        page.wait_for_url(ops_server.url + "/")
        page.goto(ops_server.url + "/history?range=1h")
        tick = page.locator("svg.chart text.tick.x").first
        stamp = float(tick.get_attribute("data-ts") or "nan")
        utc = time.strftime("%H:%M", time.gmtime(stamp))
        tokyo = time.strftime("%H:%M", time.gmtime(stamp + 9 * 3600))
        expect(tick).to_have_text(utc)
        page.click(".tz-toggle button[data-tz=local]")
        expect(tick).to_have_text(tokyo)
        expect(page.locator("figcaption.legend .tz-legend")).to_have_text("times in Asia/Tokyo")
        title = page.locator("svg.chart rect.ok title").first
        assert "Asia/Tokyo:" in (title.text_content() or "")
        page.click(".tz-toggle button[data-tz=utc]")
        expect(tick).to_have_text(utc)
        assert " UTC:" in (title.text_content() or "")
    finally:
        context.close()
