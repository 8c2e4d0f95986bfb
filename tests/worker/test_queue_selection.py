"""Issue 19 item 4: a worker serves the queues its app's tasks declare unless told otherwise.

``app.worker()`` and ``conveyor worker APP`` without ``--queues`` serve ``default`` plus every
``queue=`` of a registered task; ``queues=`` / ``--queues`` still wins; the start-up log line
names the queues and where they came from.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from tests.worker.conftest import running, wait_until


def _app() -> Conveyor:
    app = Conveyor("memory://")

    @app.task(queue="emails")
    def send_email(to: str) -> str:
        return to

    @app.task(queue="reports")
    def report(n: int) -> int:
        return n

    @app.task
    def plain() -> None:
        return None

    return app


def test_worker_serves_the_queues_its_tasks_declare() -> None:
    app = _app()
    worker = app.worker()
    assert worker.queues == ["default", "emails", "reports"]
    job = app.tasks["send_email"].enqueue("a@example.com")
    worker.run_until_idle()
    assert job.refresh().state is JobState.COMPLETED
    assert job.result == "a@example.com"


def test_explicit_queues_still_win() -> None:
    app = _app()
    worker = app.worker(["emails"])
    assert worker.queues == ["emails"]
    job = app.tasks["report"].enqueue(1)
    worker.run_until_idle()
    assert job.refresh().state is JobState.PENDING


def test_an_app_without_tasks_serves_default() -> None:
    assert Conveyor("memory://").worker().queues == ["default"]


def test_start_up_log_names_the_queues_and_their_source(caplog: Any) -> None:
    app = _app()
    caplog.set_level(logging.INFO, logger="conveyor.worker")
    for queues, expected in (
        (None, "queues=default,emails,reports (the app's tasks)"),
        ("emails", "queues=emails (given)"),
    ):
        caplog.clear()
        with running(app, queues=queues, heartbeat=False):
            wait_until(lambda: any("concurrency=" in r.getMessage() for r in caplog.records))
        line = next(r.getMessage() for r in caplog.records if "concurrency=" in r.getMessage())
        assert expected in line


@pytest.mark.slow
@pytest.mark.parametrize("mode", [(), ("--no-supervisor",)], ids=["supervised", "unsupervised"])
def test_cli_worker_without_queues_runs_jobs_of_every_task_queue(
    shared_url: str, tmp_path: Any, mode: tuple[str, ...]
) -> None:
    from tests.worker.harness import CONVEYOR, Marks, WorkerProcess

    app = Conveyor(shared_url)
    try:
        ids = [
            app.enqueue(name, args=[name], queue=queue).id
            for name, queue in (
                ("send_email", "emails"),
                ("build_report", "reports"),
                ("plain", "default"),
            )
        ]
        proc = WorkerProcess(
            shared_url,
            tmp_path,
            command=[CONVEYOR, "worker", "tests.worker.apps.queued:app", *mode],
        )
        try:
            wait_until(
                lambda: all(app.get_job(i).state is JobState.COMPLETED for i in ids), timeout=30
            )
            assert "queues=default,emails,reports (the app's tasks)" in proc.output()
            assert {m["tag"] for m in Marks(tmp_path / "marks.jsonl").of("send_email")}
        finally:
            proc.close()
    finally:
        app.close()
