"""Hostile job data in a real browser (Playwright + chromium, SQLite): terminal and invisible
characters are shown as escapes in what the operator reads, no page scrolls sideways because
of a 40 KB value, a forged flash link says nothing, and a job whose id holds a bidi override
is still the one a checkbox selects."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from conveyor import Conveyor
from conveyor.dashboard.security import DashboardConfig
from conveyor.dashboard.server import BackgroundServer

from .conftest import PASSWORD, TOKEN, USER, register_tasks
from .test_browser import CHROMIUM, SSE_OPEN, browser, login  # noqa: F401 - the browser fixture
from .test_invisible_text import RAW, pages, seed

pytestmark = pytest.mark.browser
playwright_sync = pytest.importorskip("playwright.sync_api")
WIDE = "w" * 40_000  # one unbroken 40 KB word


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed")
    app = Conveyor(f"sqlite:///{tmp_path_factory.mktemp('browser-invisible') / 'jobs.db'}")
    register_tasks(app)
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD)
    server = BackgroundServer(app, "127.0.0.1", 0, config).start()
    yield server
    server.stop()
    app.close()


def test_hostile_text_reads_as_escapes_and_never_widens_a_page(
    browser: Any,  # noqa: F811
    hostile_server: BackgroundServer,
) -> None:
    expect = playwright_sync.expect
    app = hostile_server.dashboard.app
    ids = seed(app)
    ids["wide"] = app.enqueue("boom", [WIDE, WIDE]).id
    app.worker().run_until_idle()
    page = login(browser, hostile_server.url)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        for path in pages(ids):
            page.goto(hostile_server.url + path)
            text = page.evaluate("() => document.body.innerText")
            for raw in RAW:
                assert raw not in text, (path, repr(raw))
            wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            assert wide <= 1, (path, wide)
        page.goto(f"{hostile_server.url}/jobs/{quote(ids['odd_id'], safe='')}")
        expect(page.locator("#job-id")).to_contain_text("id-\\u202eexe.txt\\x1b[2J")
        forged = quote("Session expired: sign in at https://evil.example/")
        page.goto(f"{hostile_server.url}/?flash={forged}")
        expect(page.locator(".flash")).to_have_count(0)
        page.goto(hostile_server.url + "/jobs?state=completed")
        page.check(f'input[name=ids][value="{ids["odd_id"]}"]')
        page.click('button[name=bulk][value="selected:delete"]')
        page.click("#bulk-confirm-button")
        page.wait_for_url(re.compile(r"/jobs\?state=completed&flash="))
        expect(page.locator(".flash")).to_contain_text("Delete: 1 of 1")
        assert app.broker.get(ids["odd_id"]) is None
    finally:
        page.context.close()
    assert not errors, errors


def test_live_updates_still_arrive_and_stay_escaped(
    browser: Any,  # noqa: F811
    hostile_server: BackgroundServer,
) -> None:
    """The live stream renders its first fragments before streaming now: a page still gets
    its updates, escaped like the page itself."""
    expect = playwright_sync.expect
    app = hostile_server.dashboard.app
    page = login(browser, hostile_server.url)
    try:
        app.enqueue("add", [1, 1], queue="livebidi")
        page.goto(hostile_server.url + "/")
        page.wait_for_function(SSE_OPEN, timeout=5000)
        cell = page.locator('tr[data-queue="livebidi"] td.depth')
        expect(cell).to_have_text("1")
        app.enqueue("add", ["a\u202eb", 1], queue="livebidi")
        expect(cell).to_have_text("2", timeout=5000)
        assert "\u202e" not in page.evaluate("() => document.body.innerText")
    finally:
        page.context.close()
