"""The Python blocks of docs/*.md run as written (tests/examples/docblocks.py says how), on
memory:// or SQLite here; the blocks that need a server or a configured Django project run in
the tests ``RUN_ELSEWHERE`` names. A block neither run nor marked ``<!-- fragment: why -->``
in its page fails ``test_every_python_block_is_run_or_marked_a_fragment``.
"""

from __future__ import annotations

import ast
import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, Middleware, PermanentError
from conveyor.worker.logs import reset_logging
from tests.examples.docblocks import Block, blocks, run

ROOT = Path(__file__).resolve().parents[2]
HERE = "tests/examples/test_docs_blocks.py"
#: (page, first line) -> the test that runs the block, when not a test of this file
RUN_ELSEWHERE = {
    ("integrations.md", "# mysite/asgi.py"): "tests/contrib/test_django.py::asgi",
    (
        "scaling.md",
        'app = Conveyor("redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000")',
    ): "tests/redis/test_docs_blocks_redis.py::test_scaling_sharded_queues_on_a_cluster",
    (
        "transactions.md",
        "from conveyor import Conveyor",
    ): "tests/redis/test_docs_blocks_redis.py::test_transactions_outbox_on_redis",
    (
        "transactions.md",
        "import psycopg",
    ): "tests/postgres/test_schema_doc.py::test_transactions_psycopg_block",
    (
        "integrations.md",
        "# settings.py",
    ): "tests/contrib/test_django.py::test_the_documented_settings_blocks_are_accepted",
    (
        "integrations.md",
        "# shop/tasks.py",
    ): "tests/contrib/test_django.py::test_the_documented_tasks_module_declares_a_task",
    (
        "transactions.md",
        "# settings.py",
    ): "tests/contrib/test_django.py::test_the_documented_settings_blocks_are_accepted",
    (
        "transactions.md",
        "CONVEYOR = {",
    ): "tests/contrib/test_django.py::test_the_documented_settings_blocks_are_accepted",
    (
        "transactions.md",
        "# shop/migrations/0002_conveyor_outbox.py",
    ): "tests/contrib/test_django.py::test_the_documented_outbox_migration_runs",
    (
        "flow-control.md",
        '@app.task(rate_limit="10/s", queue="partner")',
    ): "tests/examples/test_flow_control_docs.py::_recipes",
    (
        "flow-control.md",
        '@app.task(concurrency=ConcurrencyLimit(1, key="account_id"))',
    ): "tests/examples/test_flow_control_docs.py::_recipes",
    (
        "flow-control.md",
        '@app.task(fair_by="tenant_id")',
    ): "tests/examples/test_flow_control_docs.py::_recipes",
    (
        "flow-control.md",
        'app.queue("llm", rate_limit="3000/m")',
    ): "tests/examples/test_flow_control_docs.py::_recipes",
}
#: pages whose every block one test runs in order
WHOLE_PAGES = {"workflows.md": "tests/examples/test_workflow_docs.py::test_every_block_runs"}


def _run_here() -> set[tuple[str, str]]:
    """(page, first line) of the blocks the tests of this file run: read from its source."""
    source = Path(__file__).read_text(encoding="utf-8")
    calls = re.findall(r"\brun\(\s*\"([\w.-]+)\",\s*('[^'\n]*'|\"(?:[^\"\\\n]|\\.)*\")", source)
    return {(doc, ast.literal_eval(first)) for doc, first in calls}


def _covered(b: Block) -> str | None:
    if b.doc in WHOLE_PAGES:
        return WHOLE_PAGES[b.doc]
    if any(b.doc == doc and b.first.startswith(first) for doc, first in _run_here()):
        return HERE
    found = [
        t for (doc, first), t in RUN_ELSEWHERE.items() if b.doc == doc and b.first.startswith(first)
    ]
    return found[0] if found else None


def test_every_python_block_is_run_or_marked_a_fragment() -> None:
    unaccounted = [
        f"docs/{b.doc}:{b.line}: {b.first}" for b in blocks() if not b.fragment and not _covered(b)
    ]
    assert unaccounted == []
    for b in blocks():  # a fragment still parses: it is Python a reader copies from
        compile(b.code, f"docs/{b.doc}:{b.line}", "exec")
        assert not (b.fragment and _covered(b)), f"docs/{b.doc}:{b.line}: run AND a fragment"


def test_the_tests_named_for_blocks_exist() -> None:
    for where in {*RUN_ELSEWHERE.values(), *WHOLE_PAGES.values()}:
        path, _, name = where.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), where


def test_a_block_neither_run_nor_marked_is_caught() -> None:
    planted = Block("scheduling.md", 1, "app.unschedule('x')\n", None)
    assert _covered(planted) is None and not planted.fragment


# ---------------------------------------------------------------------- design.md
def test_design_autobatch() -> None:
    ns: dict[str, Any] = {}
    run("design.md", "from conveyor import AutoBatch, Conveyor", ns)  # connects on first use
    assert ns["app"].runtime.producer.autobatch is not None
    ns["app"].close()


# ---------------------------------------------------------------------- monitoring.md
def _emails_app() -> Conveyor:
    app = Conveyor("memory://")

    @app.task(queue="emails")
    def send(n: int) -> None:
        if n % 3 == 0:
            raise PermanentError("bad")

    for n in range(6):
        send.enqueue(n)
    app.worker(["emails"]).run_until_idle()
    return app


def test_monitoring_events_metrics_alerts(capsys: pytest.CaptureFixture[str]) -> None:
    app = _emails_app()
    ns: dict[str, Any] = {"app": app, "saved_cursor": None}
    run("monitoring.md", "from conveyor.monitoring.events import EventReader", ns)
    printed = capsys.readouterr().out.splitlines()
    assert ns["saved_cursor"] and any(line.startswith("completed ") for line in printed)
    summary = run("monitoring.md", "from conveyor.monitoring.inspect import Inspector", ns)
    assert summary["processed"] == 6 and summary["failure_rate"] == pytest.approx(2 / 6, abs=0.01)
    assert {"run_p95", "wait_p99"} <= set(summary)
    run("monitoring.md", "from conveyor.monitoring.alerts import WebhookNotifier", ns)
    assert [r.name for r in app.alerts.rules] == ["queue_depth", "failure_rate"]
    assert app.alerts.cooldown == 600


def test_monitoring_mount_in_fastapi() -> None:
    from starlette.testclient import TestClient

    ns: dict[str, Any] = {"app": Conveyor("memory://"), "dashboard_token": "t" * 32}
    run("monitoring.md", "from fastapi import FastAPI", ns)
    client = TestClient(ns["api"], base_url="http://jobs.example.com")
    assert client.get("/admin/jobs/api/v1/queues").status_code == 401  # the token is required
    headers = {"Authorization": "Bearer " + "t" * 32}
    assert client.get("/admin/jobs/api/v1/queues", headers=headers).status_code == 200


# ---------------------------------------------------------------------- operations.md
def test_operations_process_executor_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {"Conveyor": Conveyor, "__name__": "jobs"}  # imported, not run
    run("operations.md", 'app = Conveyor("sqlite:///jobs.db")', ns)
    assert ns["app"].tasks["crunch"].executor == "process"
    assert ns["app"].broker.counts() == {}  # the guard kept the enqueue out


def test_operations_configure_logging(capsys: pytest.CaptureFixture[str]) -> None:
    app = Conveyor("memory://")

    @app.task
    def hello() -> None:
        logging.getLogger("myapp").warning("hello from a job")

    job = hello.enqueue()
    try:  # the block's worker serves until stopped: here, until the queue is empty
        run(
            "operations.md",
            "import conveyor",
            {"app": app},
            {"app.worker().run()": "app.worker().run_until_idle()"},
        )
    finally:
        reset_logging()
    assert job.refresh().state == "completed"
    assert '"msg":"hello from a job","job_id"' in capsys.readouterr().err


def test_operations_middleware_blocks() -> None:
    ns: dict[str, Any] = {}
    run("operations.md", "import contextlib, contextvars", ns)
    seen = []
    app = Conveyor("memory://", middleware=[ns["Tenant"]()])

    @app.task
    def who() -> None:
        seen.append(ns["tenant"].get())

    who.options(metadata={"tenant": "acme"}).enqueue()
    app.worker().run_until_idle()
    assert seen == ["acme"]

    class Tracing(Middleware):
        pass

    ns = {"url": "memory://", "Tracing": Tracing}
    run("operations.md", "from conveyor import Conveyor, default_middleware", ns)
    assert isinstance(ns["app"].middleware[-1], Tracing) and len(ns["app"].middleware) > 1
    assert [type(m) for m in ns["bare"].middleware] == [Tracing]


# ---------------------------------------------------------------------- scheduling.md
def test_scheduling_blocks_in_order() -> None:
    clock = FakeClock(1_700_000_000.0)
    app = Conveyor("memory://", clock=clock)
    cleaned: list[float] = []

    @app.task
    def send_email(to: str) -> None: ...

    @app.task
    def cleanup_tmp() -> None: ...

    @app.task
    def heartbeat() -> None: ...

    ns: dict[str, Any] = {
        "app": app,
        "send_email": send_email,
        "heartbeat": heartbeat,
        "remove_old_exports": cleaned.append,
    }
    run("scheduling.md", "from datetime import UTC, datetime, timedelta", ns)
    assert app.broker.counts()["default"]["scheduled"] == 4
    assert app.broker.counts()["high"]["scheduled"] == 1
    run("scheduling.md", '@app.cron("0 9 * * mon-fri", tz="Europe/Berlin", name="digest")', ns)
    assert set(app.schedules.declared) == {"digest", "sync", "nightly_report"}
    removed = run("scheduling.md", 'app.schedule_cron("cleanup", "cleanup_tmp"', ns)
    assert removed is True and {s.name for s in app.list_schedules()} == {"beat"}
    run("scheduling.md", "from conveyor.scheduler import Plugin", ns, {".run()": ".tick()"})
    assert cleaned == [clock.now()]


# ---------------------------------------------------------------------- observability
def test_observability_middleware_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SENTRY_DSN", raising=False)  # sentry_sdk.init() then sends nothing
    ns: dict[str, Any] = {"url": "memory://"}
    run("observability-integrations.md", "from conveyor import Conveyor, default_middleware", ns)
    names = [type(m).__name__ for m in ns["app"].middleware]
    assert names[-1] == "OpenTelemetryMiddleware"
    run("observability-integrations.md", "import sentry_sdk", ns)
    assert type(ns["app"].middleware[-1]).__name__ == "SentryMiddleware"


# ---------------------------------------------------------------------- flow-control.md
def test_flow_control_unique_and_debounce() -> None:
    app = Conveyor("memory://")
    ns: dict[str, Any] = {
        "app": app,
        "user_id": 7,
        "ref": "abc",
        "v": "1.2",
        "doc_id": 3,
        "text": "hello",
    }
    for name, params in (
        ("report", "user_id"),
        ("build", "ref"),
        ("deploy", "v"),
        ("reindex", "doc_id, text"),
    ):
        exec(f"@app.task\ndef {name}({params}): ...", ns)
    run("flow-control.md", 'report.options(unique="while_queued")', ns)
    again = ns["report"].options(unique="while_queued").enqueue(7)
    assert again.duplicate
    assert app.broker.counts()["default"]["pending"] == 3
    assert app.broker.counts()["default"]["scheduled"] == 1  # the debounced one waits 5 s


# ---------------------------------------------------------------------- transactions.md
def _shop(tmp_path: Path) -> str:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:  # the reader's own table
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    return str(path)


def test_transactions_summary_block(tmp_path: Path) -> None:
    path = _shop(tmp_path)
    app = Conveyor(f"sqlite:///{path}")

    @app.task
    def ship(order_id: int) -> None: ...

    conn = sqlite3.connect(path)
    ns: dict[str, Any] = {"app": app, "task": ship, "conn": conn, "order_id": 42}
    run("transactions.md", "task.options(connection=conn)", ns)
    assert app.broker.counts() == {}  # nothing before the commit
    conn.commit()
    assert app.broker.counts()["default"]["pending"] == 4


def test_transactions_sqlite_block(tmp_path: Path) -> None:
    path = _shop(tmp_path)
    ns: dict[str, Any] = {}
    run("transactions.md", "import sqlite3", ns, {"/srv/shop/shop.db": path})
    assert ns["app"].broker.counts()["default"]["pending"] == 1


def test_transactions_sqlalchemy_block(tmp_path: Path) -> None:
    from sqlalchemy import Column, Integer
    from sqlalchemy.orm import DeclarativeBase

    path = _shop(tmp_path)
    app = Conveyor(f"sqlite:///{path}")  # as the sqlite3 block above declared it

    @app.task
    def ship(order_id: int) -> None: ...

    class Base(DeclarativeBase):
        pass

    class Order(Base):  # the reader's model of the orders table
        __tablename__ = "orders"
        id = Column(Integer, primary_key=True)

    ns: dict[str, Any] = {"ship": ship, "Order": Order}
    run(
        "transactions.md",
        "from sqlalchemy import create_engine, text",
        ns,
        {"/srv/shop/shop.db": path},
    )
    assert app.broker.counts()["default"]["pending"] == 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (2,)  # 42 and 43


# ---------------------------------------------------------------------- integrations.md
def test_integrations_fastapi() -> None:
    from starlette.testclient import TestClient

    ns: dict[str, Any] = {}
    run(
        "integrations.md",
        "from fastapi import FastAPI",
        ns,
        {"redis://localhost:6379/0": "memory://"},
    )
    with TestClient(ns["api"]) as client:  # the lifespan starts and drains the worker
        job_id = client.post("/signup", params={"email": "a@example.com"}).json()["job"]
        assert ns["conveyor"].get_job(job_id).wait(timeout=30) is None


def test_integrations_flask() -> None:
    ns: dict[str, Any] = {}
    run("integrations.md", "from flask import Flask", ns, {"redis://localhost:6379/0": "memory://"})
    flask_app = ns["create_app"]()
    conveyor = flask_app.extensions["conveyor"]
    assert conveyor.settings.visibility_timeout == 30.0  # CONVEYOR_SETTINGS
    assert type(conveyor.broker).__name__ == "MemoryBroker"  # CONVEYOR_URL (swapped)
    assert conveyor.tasks["send_welcome"].max_attempts == 5
