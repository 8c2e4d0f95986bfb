"""Screenshots of the dashboard for README.md and docs/monitoring.md.

Starts the dashboard on the showcase data (tests/dashboard/showcase.py: several queues, a
worker, failures, retries, schedules, alerts) in a temporary SQLite file, logs in with
Playwright's chromium and saves PNGs to docs/images/:

    .venv/bin/python scripts/screenshots.py [--out docs/images] [--chromium /usr/bin/chromium]

Pages: overview, jobs (with a bulk selection), job detail, dead letters, bulk confirmation,
schedules, queue, alerts, workers, queues, history and login.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

USER, PASSWORD, TOKEN = "admin", "correct horse battery", "screenshot-token-0123456789"
VIEWPORT = {"width": 1360, "height": 860}
SSE_OPEN = """() => { const el = document.querySelector('[sse-connect]');
  const d = el && el['htmx-internal-data'];
  return !!(d && d.sseEventSource && d.sseEventSource.readyState === 1); }"""


def log_in(browser: Any, url: str) -> Any:
    """A page of a fresh browser context, logged in through the form."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(url + "/login")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(url + "/")
    return page


def shoot(page: Any, url: str, path: str, target: Path, full: bool = False) -> Path:
    """Open ``path`` and save its screenshot as ``target``."""
    page.goto(url + path)
    if page.locator("[sse-connect]").count():
        page.wait_for_function(SSE_OPEN, timeout=5000)
    page.wait_for_timeout(400)
    page.screenshot(path=str(target), full_page=full)
    return target


def extra_data(app: Any) -> None:
    """Delayed and retrying jobs, so the jobs page shows run-now and bulk actions."""
    for i in range(3):
        app.enqueue("images.resize", [f"/uploads/late_{i}.jpg", 320], queue="default", delay=3600)


def run(out: Path, chromium: str) -> list[Path]:
    """Start the dashboard on showcase data and save the screenshots; returns the files."""
    from playwright.sync_api import sync_playwright
    from tests.dashboard.conftest import register_tasks
    from tests.dashboard.showcase import populate

    from conveyor import Conveyor
    from conveyor.dashboard.security import DashboardConfig
    from conveyor.dashboard.server import BackgroundServer

    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        app = Conveyor(f"sqlite:///{Path(tmp) / 'showcase.db'}")
        register_tasks(app)
        stop = populate(app)
        extra_data(app)
        config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD)
        server = BackgroundServer(app, "127.0.0.1", 0, config).start()
        url = server.url
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=chromium, headless=True, args=["--no-sandbox"]
                )
                anon = browser.new_page(viewport={"width": 1100, "height": 640})
                saved.append(shoot(anon, url, "/login", out / "dashboard-login.png"))
                page = log_in(browser, url)
                dead = app.dead_letters(queue="reports", limit=1)[0].id
                plain = {
                    "overview": ("/", True),
                    "queue": ("/queues/emails", False),
                    "job": (f"/jobs/{dead}", True),
                    "dead-letters": ("/dead", False),
                    "schedules": ("/schedules", False),
                    "alerts": ("/alerts", False),
                    "workers": ("/workers", False),
                    "queues": ("/queues", False),
                    "history": ("/history", False),
                }
                for name, (path, full) in plain.items():
                    saved.append(shoot(page, url, path, out / f"dashboard-{name}.png", full))
                page.goto(url + "/jobs")
                for i in (1, 2, 4):
                    page.locator("input[name=ids]").nth(i).check()
                page.screenshot(path=str(out / "dashboard-jobs.png"))
                saved.append(out / "dashboard-jobs.png")
                page.goto(url + "/jobs?state=scheduled")
                page.check("input.select-all")
                page.click('button[name=bulk][value="selected:run_now"]')
                page.screenshot(path=str(out / "dashboard-bulk-confirm.png"))
                saved.append(out / "dashboard-bulk-confirm.png")
                browser.close()
        finally:
            server.stop()
            stop()
            app.close()
    return saved


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    for path in run(args.out, args.chromium):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()
