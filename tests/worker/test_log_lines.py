"""``--log-format text``: one line per record, whatever job data holds (issue 13, hostile 12).

A newline in an exception message used to forge a whole log line. Record lines start with a
timestamp; continuation lines (tracebacks) start with whitespace; control characters in
messages are escaped.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from conveyor import Conveyor
from conveyor.worker.leanlog import LeanLogger
from conveyor.worker.logs import reset_logging, setup_logging
from tests.support.hostile import HOSTILE_TEXT

INDENT = "    "  # conveyor.worker.logs.INDENT
# any logger: the handler is on the root logger (issue 19), so a client library's debug lines
# (redis.connection) are formatted too
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ +\[\d+\] [\w.]+: ")


class Counter(logging.Handler):
    """Counts the records that reach the root logger (Conveyor's and every other logger's)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1


@pytest.fixture
def text_log() -> Iterator[tuple[io.StringIO, Counter]]:
    stream, counter = io.StringIO(), Counter()
    setup_logging("text", "DEBUG", stream=stream)
    logging.getLogger().addHandler(counter)
    try:
        yield stream, counter
    finally:
        logging.getLogger().removeHandler(counter)
        reset_logging()


def assert_one_line_per_record(text: str, records: int) -> None:
    lines = text.splitlines()
    starts = [line for line in lines if RECORD.match(line)]
    assert len(starts) == records, text
    assert all(RECORD.match(line) or line.startswith(INDENT) for line in lines), text
    assert not any(line.startswith(("forged", "red")) for line in lines), text


def test_job_errors_with_newlines_stay_on_their_line(
    app: Conveyor, text_log: tuple[io.StringIO, Counter]
) -> None:
    stream, counter = text_log

    @app.task(max_attempts=1)
    def hostile(name: str) -> None:
        raise ValueError(HOSTILE_TEXT[name])

    for name in ("newline", "carriage_return", "unicode"):
        hostile.enqueue(name)
    assert app.worker().run_until_idle() == 3
    assert counter.records >= 3
    assert_one_line_per_record(stream.getvalue(), counter.records)
    assert "first line\\nforged: log line" in stream.getvalue()
    assert "ok\\r\\x1b[2J\\x1b[31mred" in stream.getvalue()


def test_tracebacks_are_indented_continuation_lines(text_log: tuple[io.StringIO, Counter]) -> None:
    stream, counter = text_log
    log = logging.getLogger("conveyor.worker")
    try:
        raise RuntimeError(
            HOSTILE_TEXT["newline"] + "\r\n2026-01-01 00:00:00,000 ERROR [1] conveyor"
        )
    except RuntimeError:
        log.exception("job %s failed: %s", "id\n1", HOSTILE_TEXT["carriage_return"])
    log.warning("plain %s", HOSTILE_TEXT["unicode"])
    assert counter.records == 2
    assert_one_line_per_record(stream.getvalue(), 2)
    assert "RuntimeError: first line" in stream.getvalue()


def test_lean_supervisor_log_escapes_too() -> None:
    stream = io.StringIO()
    LeanLogger("conveyor.supervisor", "text", "info", stream=stream).warning(
        "worker %s exited", HOSTILE_TEXT["newline"]
    )
    assert_one_line_per_record(stream.getvalue(), 1)


def test_outcome_lines_are_one_line_under_the_apps_own_logging(
    app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    """Without Conveyor's formatters (an app with its own ``logging.basicConfig``), the
    outcome line's message is still one safe line: the job's error text is escaped in it."""

    @app.task(max_attempts=1)
    def hostile(name: str) -> None:
        raise ValueError(HOSTILE_TEXT[name])

    for name in ("newline", "carriage_return", "unicode"):
        hostile.enqueue(name)
    with caplog.at_level(logging.WARNING, logger="conveyor"):
        assert app.worker().run_until_idle() == 3
    outcome = [r.getMessage() for r in caplog.records if "outcome=" in r.getMessage()]
    assert len(outcome) == 3, outcome
    for message in outcome:
        assert not any(ch in message for ch in "\n\r\x1b\x00"), repr(message)
    assert any("first line\\nforged: log line" in m for m in outcome), outcome
