"""Realistic data for the dashboard screenshots: several queues, failures, schedules, alerts."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from conveyor import Conveyor, Retry
from conveyor.monitoring.rules import FailureRate, QueueDepth

_stop_media = threading.Event()


def _register(app: Conveyor) -> None:
    if "reports.build" in app.tasks:
        return
    rng = random.Random(7)

    @app.task(name="reports.build", queue="reports", max_attempts=2)
    def build(report: str, month: str) -> dict[str, str]:
        time.sleep(rng.uniform(0.001, 0.02))
        if report == "churn":
            raise KeyError(f"column 'plan_id' missing in {month} export")
        return {"report": report, "url": f"s3://reports/{month}/{report}.pdf"}

    @app.task(name="images.resize", queue="default")
    def resize(path: str, width: int) -> str:
        time.sleep(rng.uniform(0.001, 0.01))
        return f"{path}@{width}w"

    @app.task(name="webhooks.deliver", queue="emails", max_attempts=3)
    def deliver(url: str, event: str) -> int:
        if "flaky" in url and rng.random() < 0.5:
            raise Retry(delay=0.05)
        return 200

    @app.task(name="video.transcode", queue="media")
    def transcode(video: str) -> str:
        _stop_media.wait(60)
        return video

    @app.every(30, name="health-ping")
    def ping() -> None:
        pass


def populate(app: Conveyor) -> Callable[[], None]:
    """Fill ``app`` and start a worker; returns a function that stops it."""
    _register(app)
    _stop_media.clear()
    months = ["2024-01", "2024-02", "2024-03"]
    specs = [app.tasks["images.resize"].spec(f"/uploads/img_{i:04d}.jpg", 640) for i in range(120)]
    specs += [app.tasks["emails.send"].spec(f"user{i}@example.com") for i in range(60)]
    hooks = [f"https://hooks.example.com/{'flaky' if i % 4 == 0 else 'ok'}" for i in range(40)]
    specs += [app.tasks["webhooks.deliver"].spec(url, "order.paid") for url in hooks]
    specs += [
        app.tasks["reports.build"].spec(r, m) for r in ("revenue", "churn", "usage") for m in months
    ]
    app.enqueue_many(specs)
    app.enqueue("boom", [{"order": 1042, "note": "<b>not bold</b>"}], queue="default")
    app.schedule_cron(
        "nightly-report",
        "reports.build",
        "0 3 * * *",
        tz="Europe/Berlin",
        args=["revenue", "latest"],
    )
    scheduler = app.scheduler()
    scheduler.tick()
    worker = app.worker(
        ["default", "emails", "reports", "media"], concurrency=4, handle_signals=False
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        counts = app.broker.counts()
        busy = sum(
            counts.get(q, {}).get(s, 0)
            for q in ("default", "emails", "reports")
            for s in ("pending", "active", "retry_scheduled")
        )
        if busy == 0:
            break
        time.sleep(0.05)
    app.enqueue("video.transcode", ["keynote-2024.mov"])
    app.enqueue("video.transcode", ["onboarding.mp4"])
    for i in range(35):
        app.enqueue("images.resize", [f"/uploads/hi_{i}.png", 2048], queue="high", priority=-1)
    app.pause("reports")
    app.enqueue("reports.build", ["usage", "2024-04"])
    scheduler.tick()
    app.alerts.rules.clear()
    app.alerts.add_rule(QueueDepth(threshold=20, queue="high", name="high-backlog"))
    app.alerts.add_rule(FailureRate(percent=5, window=15))
    app.alerts.evaluate()
    time.sleep(0.3)

    def stop() -> None:
        _stop_media.set()
        worker.stop(timeout=5)
        thread.join(10)

    return stop
