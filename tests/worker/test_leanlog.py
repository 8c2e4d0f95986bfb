"""The lean supervisor's logger writes the lines ``conveyor.worker.logs`` would write."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
from pathlib import Path

import pytest

from conveyor.worker.leanlog import LeanLogger, json_string
from conveyor.worker.logs import setup_logging
from tests.worker.harness import WorkerProcess


def _stdlib_line(fmt: str, msg: str, *args: object) -> str:
    stream = io.StringIO()
    setup_logging(fmt, "INFO", stream=stream)
    try:
        logging.getLogger("conveyor.supervisor").warning(msg, *args)
    finally:
        setup_logging("text", "WARNING")
    return stream.getvalue()


def _lean_line(fmt: str, msg: str, *args: object) -> str:
    stream = io.StringIO()
    LeanLogger("conveyor.supervisor", fmt, "info", stream=stream).warning(msg, *args)
    return stream.getvalue()


def test_text_lines_match_the_logging_format() -> None:
    shape = re.compile(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING \[(\d+)\] "
        r"conveyor\.supervisor: worker process 12 started \(slot 0\)\n$"
    )
    for line in (
        _stdlib_line("text", "worker process %d started (slot %d)", 12, 0),
        _lean_line("text", "worker process %d started (slot %d)", 12, 0),
    ):
        match = shape.match(line)
        assert match and int(match.group(1)) == os.getpid(), line


def test_json_lines_match_the_json_formatter() -> None:
    msg = 'quote " backslash \\ newline \n tab \t bell \x07 unicode é ✓'
    stdlib = json.loads(_stdlib_line("json", "%s", msg))
    lean = json.loads(_lean_line("json", "%s", msg))
    assert list(lean) == list(stdlib) == ["ts", "level", "logger", "pid", "msg"]
    assert {k: lean[k] for k in ("level", "logger", "pid", "msg")} == {
        "level": "warning",
        "logger": "conveyor.supervisor",
        "pid": os.getpid(),
        "msg": msg,
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", lean["ts"])
    assert json.loads(json_string(msg)) == msg


def test_level_threshold() -> None:
    stream = io.StringIO()
    log = LeanLogger("conveyor.supervisor", "text", "warning", stream=stream)
    log.info("hidden")
    log.log(40, "shown %s", "error")
    assert "hidden" not in stream.getvalue() and "ERROR   " in stream.getvalue()
    with pytest.raises(ValueError):
        LeanLogger("x", "xml")


@pytest.mark.slow
def test_lean_supervisor_logs_json_lines(tmp_path: Path) -> None:
    w = WorkerProcess(f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path, "--log-format", "json")
    try:
        w.wait_ready()
        w.signal(signal.SIGTERM)
        assert w.wait(timeout=10) == 0
        lines = [json.loads(x) for x in w.output().splitlines() if x.strip()]
        mine = [x for x in lines if x["logger"] == "conveyor.supervisor"]
        assert any("started (slot 0)" in x["msg"] for x in mine)
        assert any(x["msg"].endswith("all worker processes stopped") for x in mine)
        assert {x["pid"] for x in mine} == {w.pid}
    finally:
        w.close()
