"""Issue 16 in a real browser: a running job's progress updates live on its page, and its
Cancel button stops it (the job ends ``cancelled`` on the page). Run with ``pytest -m browser``.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest

from conveyor import Conveyor, current_job
from conveyor.dashboard.server import BackgroundServer

from .test_browser import SSE_OPEN, playwright_sync

# the module fixtures of test_browser.py, reused (imported names are registered by pytest)
from .test_browser import browser as browser
from .test_browser import live_app as live_app
from .test_browser import page as page
from .test_browser import server as server
from .test_browser import session as session

pytestmark = pytest.mark.browser


def test_progress_updates_live_and_cancel_stops_the_running_job(
    page: Any,
    server: BackgroundServer,
    live_app: Conveyor,
) -> None:
    expect = playwright_sync.expect
    step = threading.Semaphore(0)

    @live_app.task(name="resize_all", queue="progress", max_attempts=3)
    def resize_all(n: int) -> None:
        ctx = current_job()
        for i in range(1, n + 1):
            step.acquire()
            ctx.progress(i / n, f"resized {i} of {n}")
        while True:  # waits for the operator: cancelled from the page
            time.sleep(0.01)

    job = live_app.enqueue("resize_all", [4])
    worker = live_app.worker(["progress"], handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        page.goto(server.url + f"/jobs/{job.id}")
        page.wait_for_function(SSE_OPEN, timeout=5000)
        expect(page.locator("#job-state")).to_have_text("active", timeout=5000)
        progress = page.locator("#job-progress-text")
        step.release()
        expect(progress).to_have_text("25% resized 1 of 4", timeout=3000)
        step.release()
        step.release()  # two quick reports: the throttle writes the latest one
        expect(progress).to_have_text("75% resized 3 of 4", timeout=3000)
        step.release()  # the last step: the job then runs Python code, where a cancel lands
        page.once("dialog", lambda dialog: dialog.accept())
        page.click(f'#job-actions button[hx-post="/jobs/{job.id}/cancel"]')
        expect(page.locator("#job-state")).to_have_text("cancelled", timeout=5000)
        assert live_app.get_job(job.id).attempts == 1
        assert re.search(r"/jobs/" + job.id, page.url)
    finally:
        worker.stop(timeout=5)
        thread.join(10)
