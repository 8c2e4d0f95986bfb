"""Text logs show invisible format characters (bidi marks, isolates, zero-width characters, the
byte-order mark) as escapes, as the pages and the CLI do; JSON logs keep them and stay valid JSON.

A job whose error is ``user\\u202egnp.exe`` used to write the override raw into a text log, so a
terminal or a log viewer reordered the rest of the line (``userexe.png``).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from conveyor import Conveyor
from conveyor.worker.leanlog import LeanLogger, text_safe
from conveyor.worker.logs import reset_logging, setup_logging
from tests.support.hostile import INVISIBLE_FORMAT

RAW = {ch for text in INVISIBLE_FORMAT.values() for ch in text if not ch.isprintable()}


@pytest.fixture(params=["text", "json"])
def log_format(request: pytest.FixtureRequest) -> Iterator[tuple[str, io.StringIO]]:
    stream = io.StringIO()
    setup_logging(request.param, "DEBUG", stream=stream)
    try:
        yield request.param, stream
    finally:
        reset_logging()


def _check(fmt: str, text: str, expected: list[str]) -> None:
    if fmt == "text":
        assert not RAW & set(text), [ch for ch in text if ch in RAW]
        for value in expected:
            assert text_safe(value) in text
        return
    messages = [json.loads(line) for line in text.splitlines()]  # every line is valid JSON
    whole = json.dumps(messages, ensure_ascii=False)
    for value in expected:
        assert value in whole or text_safe(value) in whole, value


def test_failed_job_errors_are_escaped_in_text_logs(
    app: Conveyor, log_format: tuple[str, io.StringIO]
) -> None:
    fmt, stream = log_format

    @app.task(max_attempts=1)
    def hostile(name: str) -> None:
        logging.getLogger("app.jobs").warning("job data %s", INVISIBLE_FORMAT[name])
        raise ValueError(INVISIBLE_FORMAT[name])

    for name in INVISIBLE_FORMAT:
        hostile.enqueue(name)
    assert app.worker().run_until_idle() == len(INVISIBLE_FORMAT)
    _check(fmt, stream.getvalue(), list(INVISIBLE_FORMAT.values()))


def test_tracebacks_escape_invisible_characters(log_format: tuple[str, io.StringIO]) -> None:
    fmt, stream = log_format
    try:
        raise RuntimeError(INVISIBLE_FORMAT["overrides"])
    except RuntimeError:
        logging.getLogger("conveyor.worker").exception("failed: %s", INVISIBLE_FORMAT["isolates"])
    _check(fmt, stream.getvalue(), [INVISIBLE_FORMAT["isolates"]])


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_lean_supervisor_log_escapes_invisible_characters(fmt: str) -> None:
    stream = io.StringIO()
    log = LeanLogger("conveyor.supervisor", fmt, "info", stream=stream)
    for value in INVISIBLE_FORMAT.values():
        log.warning("worker %s exited", value)
    _check(fmt, stream.getvalue(), list(INVISIBLE_FORMAT.values()))
    if fmt == "json":
        msgs = [json.loads(line)["msg"] for line in stream.getvalue().splitlines()]
        assert msgs == [f"worker {v} exited" for v in INVISIBLE_FORMAT.values()]


def test_escapes_are_readable_and_plain_text_is_untouched() -> None:
    assert text_safe("user\u202egnp.exe") == "user\\u202egnp.exe"
    assert text_safe("\ufeffx\u2066y\u2069") == "\\ufeffx\\u2066y\\u2069"
    assert text_safe("flag\U000e0041") == "flag\\U000e0041"
    assert text_safe("a\nb\rc\x1b\td") == "a\\nb\\rc\\x1b\td"
    plain = "名前 🚀 café — ok\ttab"
    assert text_safe(plain) is plain or text_safe(plain) == plain


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_lone_surrogate_does_not_lose_the_supervisor_line(fmt: str) -> None:
    """An app reference from a non-UTF-8 argv holds lone surrogates (``\\udcff``): writing the
    line raised UnicodeEncodeError on a UTF-8 stream, swallowed, so the line was lost."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    LeanLogger("conveyor.supervisor", fmt, "info", stream=stream).info(
        "starting 2 worker process(es) for %s", "caf\udcff:app"
    )
    line = raw.getvalue().decode("utf-8")
    assert line.count("\n") == 1, line
    if fmt == "json":
        assert json.loads(line)["msg"] == "starting 2 worker process(es) for caf\udcff:app"
    else:
        assert "caf\\udcff:app" in line


def test_a_lone_surrogate_in_a_job_error_stays_one_text_line(app: Conveyor) -> None:
    """``ValueError(os.listdir()[0])`` on a non-UTF-8 file name: the text line could not be
    encoded on a UTF-8 stream ("--- Logging error ---" and the record lost)."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    setup_logging("text", "INFO", stream=stream)
    try:

        @app.task(max_attempts=1)
        def listing() -> None:
            raise ValueError("name-\udcff.txt")

        listing.enqueue()
        assert app.worker().run_until_idle() == 1
    finally:
        reset_logging()
    text = raw.getvalue().decode("utf-8")
    assert "name-\\udcff.txt" in text, text
