"""Issue 19 item 7: one logging configuration for Conveyor's and the user's loggers.

``configure_logging`` (``--log-format``) formats a handler's own ``logging`` calls like the
worker's lines; records emitted inside a handler carry the job id, task and attempt on every
executor (inline, thread, asyncio, process); a failure's outcome line at WARNING carries its
traceback; hostile job data (newlines, control characters, 40 KB, lone surrogates) never
breaks a line in either format.
"""

from __future__ import annotations

import io
import json
import logging
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.config import Settings
from conveyor.worker.logs import INDENT, JobContextFilter, configure_logging, reset_logging
from tests.support.hostile import HOSTILE_TEXT
from tests.worker.conftest import FAST, running, wait_until

user_log = logging.getLogger("myapp.jobs")
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ +\[\d+\] [\w.]+: ")
HUGE = "y" * 40_000
HOSTILE = [*HOSTILE_TEXT.values(), HUGE, "tab\there\x00nul\x7fdel\u2028ls"]


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("json", "INFO", stream=stream)
    try:
        yield stream
    finally:
        reset_logging()


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("text", "INFO", stream=stream)
    try:
        yield stream
    finally:
        reset_logging()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def sqlite_app(tmp_path: Path) -> Conveyor:
    return Conveyor(
        f"sqlite:///{tmp_path / 'jobs.db'}",
        settings=Settings(**FAST),  # type: ignore[arg-type]
        rng=random.Random(1),
    )


def test_user_logs_are_json_with_the_job_context_inline(json_log: io.StringIO) -> None:
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0))

    @app.task
    def greet(name: str) -> None:
        user_log.info("hello %s", name)
        user_log.warning("careful")

    job = greet.enqueue("ann")
    user_log.info("outside any job")
    assert app.worker().run_until_idle() == 1
    out = lines(json_log)
    hello = next(x for x in out if x["msg"] == "hello ann")
    assert hello["logger"] == "myapp.jobs" and hello["level"] == "info"
    assert (hello["job_id"], hello["task"], hello["attempt"]) == (job.id, "greet", 1)
    assert hello["queue"] == "default"
    careful = next(x for x in out if x["msg"] == "careful")
    assert careful["job_id"] == job.id and careful["level"] == "warning"
    outside = next(x for x in out if x["msg"] == "outside any job")
    assert "job_id" not in outside


@pytest.mark.parametrize("kind", ["thread", "asyncio", "timeout"])
def test_job_context_on_the_worker_executors(
    kind: str, json_log: io.StringIO, tmp_path: Path
) -> None:
    app = sqlite_app(tmp_path)
    try:
        if kind == "asyncio":

            @app.task(name="ctx")
            async def ctx_async(tag: str) -> None:
                user_log.info("in %s", tag)

        else:

            @app.task(name="ctx", timeout=30 if kind == "timeout" else None)
            def ctx_sync(tag: str) -> None:
                user_log.info("in %s", tag)

        jobs = {f"t{i}": app.enqueue("ctx", args=[f"t{i}"]) for i in range(6)}
        if kind == "timeout":  # the inline path with a timeout: a helper thread
            assert app.worker().run_until_idle() == 6
        else:
            with running(app, concurrency=3) as worker:
                wait_until(lambda: worker.processed == 6, timeout=20)
        seen = {x["msg"][3:]: x for x in lines(json_log) if x["msg"].startswith("in ")}
        assert {tag: seen[tag]["job_id"] for tag in jobs} == {t: j.id for t, j in jobs.items()}
        assert all(x["task"] == "ctx" and x["attempt"] == 1 for x in seen.values())
    finally:
        app.close()


def test_failure_lines_carry_the_traceback(json_log: io.StringIO) -> None:
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0))

    @app.task(max_attempts=2)
    def explode() -> None:
        raise ValueError("kaboom")

    job = explode.enqueue()
    app.worker().run_until_idle()
    failure = next(x for x in lines(json_log) if x.get("outcome") == "retry_scheduled")
    assert failure["level"] == "warning" and failure["job_id"] == job.id
    assert "Traceback (most recent call last)" in failure["exc"]
    assert 'raise ValueError("kaboom")' in failure["exc"]


def test_failure_traceback_in_text_is_indented(text_log: io.StringIO) -> None:
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0))

    @app.task(max_attempts=1)
    def explode() -> None:
        raise ValueError(HOSTILE_TEXT["newline"])

    explode.enqueue()
    app.worker().run_until_idle()
    text = text_log.getvalue()
    assert "outcome=dead_letter" in text
    assert INDENT + "Traceback (most recent call last)" in text
    assert all(RECORD.match(line) or line.startswith(INDENT) for line in text.splitlines())
    assert not any(line.startswith("forged") for line in text.splitlines())


def _log_hostile(app: Conveyor) -> int:
    """Jobs whose handlers log (and raise) hostile text; returns how many "got" lines to expect."""

    @app.task(max_attempts=1)
    def noisy(value: str) -> None:
        user_log.info("got %s", value)
        user_log.warning(value, extra={"detail": value})
        raise ValueError(value)

    @app.task(max_attempts=1)
    def surrogate() -> None:  # a lone surrogate cannot be stored as an argument: made here
        value = "name-" + chr(0xDCFF) + ".txt"
        user_log.info("got %s", value)
        raise OSError(value)

    for value in HOSTILE:
        noisy.enqueue(value)
    surrogate.enqueue()
    return len(HOSTILE) + 1


def test_hostile_job_data_never_breaks_a_json_line(json_log: io.StringIO) -> None:
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0))
    expected = _log_hostile(app)
    app.worker().run_until_idle()
    raw = json_log.getvalue().splitlines()
    records = [json.loads(line) for line in raw]  # every line is one JSON object
    assert sum(1 for r in records if r["msg"].startswith("got ")) == expected
    assert all(len(line) < 40_000 for line in raw)
    got = {r["msg"] for r in records}
    assert "got " + HOSTILE_TEXT["newline"] in got  # escaped by JSON, not altered


def test_hostile_job_data_never_breaks_a_text_line(text_log: io.StringIO) -> None:
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0))
    expected = _log_hostile(app)
    app.worker().run_until_idle()
    raw = text_log.getvalue().splitlines()
    starts = [line for line in raw if RECORD.match(line)]
    assert all(RECORD.match(line) or line.startswith(INDENT) for line in raw)
    assert sum(1 for line in starts if "myapp.jobs: got " in line) == expected
    assert not any(line.startswith(("forged", "red")) for line in raw)
    assert all(len(line) < 40_000 for line in raw)
    assert "first line\\nforged: log line" in text_log.getvalue()


def test_the_filter_serves_the_users_own_handler(caplog: pytest.LogCaptureFixture) -> None:
    app = Conveyor("memory://", clock=FakeClock(1_700_000_000.0))

    @app.task
    def greet() -> None:
        user_log.warning("from the handler")

    caplog.handler.addFilter(JobContextFilter())
    job = greet.enqueue()
    app.worker().run_until_idle()
    record = next(r for r in caplog.records if r.getMessage() == "from the handler")
    assert record.job_id == job.id  # type: ignore[attr-defined]
    assert record.task == "greet" and record.attempt == 1  # type: ignore[attr-defined]


def test_configure_logging_is_public_and_replaces_itself() -> None:
    import conveyor

    first, second = io.StringIO(), io.StringIO()
    try:
        conveyor.configure_logging("json", "INFO", stream=first)
        conveyor.configure_logging("json", "INFO", stream=second)
        user_log.info("once")
        assert first.getvalue() == "" and json.loads(second.getvalue())["msg"] == "once"
        mine = [h for h in logging.getLogger().handlers if getattr(h, "_conveyor", False)]
        assert len(mine) == 1
    finally:
        reset_logging()


@pytest.mark.slow
def test_conveyor_worker_json_formats_the_users_logs(env: dict[str, Any]) -> None:
    app = env["app"]
    w = env["worker"]("--log-format", "json", "--concurrency", "2")
    ok, bad, proc = (
        app.enqueue("chatty", args=["t1"]),
        app.enqueue("chatty", args=["t2"], kwargs={"fail": True}),
        app.enqueue("proc_chatty", args=["p1"]),
    )

    def records() -> list[dict[str, Any]]:
        return [json.loads(line) for line in w.output().splitlines() if line.strip()]

    def mine() -> list[dict[str, Any]]:
        return [r for r in records() if r["logger"] == "tests.worker.apps.chat"]

    wait_until(lambda: len(mine()) == 5, timeout=30)  # every line of the output is JSON
    by_msg = {r["msg"]: r for r in mine()}
    says = by_msg["chatty says t1"]
    assert (says["job_id"], says["task"], says["attempt"], says["level"]) == (
        ok.id,
        "chatty",
        1,
        "info",
    )
    warns = by_msg["chatty warns\nforged: t2"]
    assert warns["job_id"] == bad.id and warns["level"] == "warning"
    in_child = by_msg["proc_chatty says p1"]
    assert in_child["job_id"] == proc.id and in_child["task"] == "proc_chatty"
    assert in_child["pid"] == wait_until(lambda: proc.refresh().result, timeout=10)
    failed = wait_until(
        lambda: next((r for r in records() if r.get("outcome") == "dead_letter"), None),
        timeout=10,
    )
    assert failed["job_id"] == bad.id and failed["level"] == "warning"
    assert "ValueError: chatty failed t2" in failed["exc"]
    assert "Traceback (most recent call last)" in failed["exc"]
