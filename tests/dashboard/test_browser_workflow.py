"""The workflow page in a real browser (Playwright + chromium): a chord's nodes by level with
their states, from the job page's link to the workflow and back to a node (issue 16)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, chord, group
from conveyor.dashboard.security import DashboardConfig
from conveyor.dashboard.server import BackgroundServer

from .conftest import PASSWORD, TOKEN, USER, register_tasks
from .test_browser import CHROMIUM, browser, login  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.browser
playwright_sync = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def flow_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Conveyor]:
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed")
    db = tmp_path_factory.mktemp("browser-flow") / "jobs.db"
    app = Conveyor(f"sqlite:///{db}")
    register_tasks(app)
    yield app
    app.close()


@pytest.fixture(scope="module")
def flow_server(flow_app: Conveyor) -> Iterator[BackgroundServer]:
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD, live_interval=0.2)
    srv = BackgroundServer(flow_app, "127.0.0.1", 0, config).start()
    yield srv
    srv.stop()


def test_workflow_graph_from_a_job_page(
    browser: Any,  # noqa: F811
    flow_server: BackgroundServer,
    flow_app: Conveyor,
) -> None:
    expect = playwright_sync.expect
    add, boom = flow_app.tasks["add"], flow_app.tasks["boom"]
    flow = chord(
        group([add.partial(1, 2), boom.partial(), add.partial(3, 4)]), add.partial(1)
    ).enqueue(name="nightly")
    flow_app.worker().run_until_idle()
    page = login(browser, flow_server.url)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{flow_server.url}/jobs/{flow.ids[0]}")
        page.click("#job-workflow")
        page.wait_for_url(f"{flow_server.url}/workflows/{flow.id}")
        expect(page.locator("section.workflow-level")).to_have_count(2)
        first = page.locator('section.workflow-level[data-level="0"] tr.workflow-node')
        expect(first).to_have_count(3)
        expect(page.locator('tr.workflow-node[data-state="dead_letter"]')).to_have_count(1)
        last = page.locator('section.workflow-level[data-level="1"] tr.workflow-node')
        expect(last).to_have_attribute("data-state", "cancelled")
        expect(last).to_contain_text("failed")
        last.locator("a").first.click()
        page.wait_for_url(f"{flow_server.url}/jobs/{flow.ids[-1]}")
        expect(page.locator("#job-state")).to_have_text("cancelled")
    finally:
        page.context.close()
    assert not errors, errors
