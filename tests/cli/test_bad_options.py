"""A bad option value is a usage error on every backend: exit 2 and a message naming the option,
never a traceback (an out-of-range page used to overflow SQLite's and PostgreSQL's integers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.errors import ValidationError
from conveyor.monitoring.inspect import Inspector

from .conftest import run

HUGE = str(10**20)
ROOT = Path(__file__).resolve().parents[2]

CASES = [
    (["jobs", "--page", HUGE], "--page"),
    (["jobs", "--page", "-1"], "--page"),
    (["jobs", "--page", "1e99"], "--page"),
    (["jobs", "--page-size", str(10**9)], "--page-size"),
    (["dlq", "list", "--page", HUGE], "--page"),
    (["jobs", "--since", "1e999"], "since"),
    (["jobs", "--state", "\x1b[31mred"], "--state"),
    (["jobs", "--queue", "a\nb"], "queue"),
    (["history", "--range", "1y"], "range"),
    (["schedules", "next", "nightly", "-n", HUGE], "-n"),
    (["limits", "set", "rate:add", "5/s", "--burst", "nan"], "burst"),
    (["limits", "set", "rate:add", "abc"], "VALUE"),  # was 'limit': no such option
    (["limits", "set", "conc:add", "0"], "VALUE"),
    (["enqueue", "add", "--priority", HUGE], "priority"),
    (["enqueue", "add", "--delay", "-5"], "--delay"),
    (["enqueue", "add", "--delay", "1e99"], "--delay"),  # over MAX_DELAY (100 years)
    (["enqueue", "add", "--delay", "3153600001"], "--delay"),
]


@pytest.mark.parametrize(("args", "option"), CASES, ids=lambda v: repr(v)[:40])
def test_a_bad_option_value_exits_2_naming_the_option(
    cli_app: tuple[Conveyor, str], args: list[str], option: str
) -> None:
    _, target = cli_app
    result = run(*args, "--app", target)  # an escaping exception fails the test
    assert result.exit_code == 2, (result.exit_code, result.output[-500:])
    assert f"'{option}'" in result.output, result.output[-500:]
    assert "\x1b" not in result.output and "Traceback" not in result.output


def test_the_inspector_refuses_a_page_past_its_bound(cli_app: tuple[Conveyor, str]) -> None:
    app, _ = cli_app
    app.enqueue("add", [1, 2])
    with pytest.raises(ValidationError) as info:
        Inspector(app).search({}, page=10**20)
    assert info.value.field == "page"
    assert Inspector(app).search({}, page=1_000_000).items == []


DAEMON_CASES = [
    (["worker", "--max-memory-per-child", "nan"], "--max-memory-per-child"),
    (["worker", "--shutdown-timeout", "nan"], "--shutdown-timeout"),
    (["worker", "--visibility-timeout", "inf"], "--visibility-timeout"),
    (["scheduler", "--interval", "nan"], "--interval"),
    (["scheduler", "--interval", "inf"], "--interval"),
    (["relay", "--interval", "nan"], "--interval"),
]


@pytest.mark.parametrize(("args", "option"), DAEMON_CASES, ids=lambda v: repr(v)[:40])
def test_a_daemon_refuses_nan_and_infinity_before_it_starts(
    tmp_path: Path, args: list[str], option: str
) -> None:
    """NaN and infinity pass click's FloatRange: a worker crashed with a ValueError traceback
    (memory cap) or ran with a NaN shutdown timeout; a scheduler slept for ever."""
    proc = _daemon_on_sqlite(tmp_path, args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert f"'{option}'" in proc.stderr and "finite" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


TOO_LONG = [
    (["worker", "--shutdown-timeout", "1e99"], "--shutdown-timeout"),
    (["worker", "--visibility-timeout", "1e99"], "--visibility-timeout"),
    (["scheduler", "--interval", "1e99"], "--interval"),
    (["relay", "--interval", "1e99"], "--interval"),
]


@pytest.mark.parametrize(("args", "option"), TOO_LONG, ids=lambda v: repr(v)[:40])
def test_a_daemon_refuses_a_duration_over_100_years(
    tmp_path: Path, args: list[str], option: str
) -> None:
    """Finite but huge: ``Event.wait(1e99)`` raises OverflowError (a scheduler's or relay's
    loop, a worker's lease keeper and drain) once the daemon has started."""
    proc = _daemon_on_sqlite(tmp_path, args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert f"'{option}'" in proc.stderr and "3153600000" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


BAD_URLS = [
    "redis://127.0.0.1:99999/0",
    "redis://[::1",
    "postgresql://[::1",
    "postgresql://127.0.0.1:99999/db",
    "redis://127.0.0.1:6379/0?socket_timeout=abc",
    "redis://127.0.0.1:6379/abc",  # redis-py ignored a path that is not a number: db 0
    "redis://127.0.0.1:6379/1/extra",
    "sqlite:///jobs.db?timeout=abc",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_malformed_broker_url_is_a_usage_error_naming_url(url: str) -> None:
    """Garbage in ``--url`` / ``CONVEYOR_URL`` (a port past 65535, an unclosed IPv6 bracket, a
    non-number option) raised a bare ValueError traceback; ``Conveyor(url)`` now raises
    ValidationError on ``url`` and the CLI says so in one line, exit 2."""
    from conveyor import Conveyor

    with pytest.raises(ValidationError) as info:
        Conveyor(url)
    assert info.value.field == "url"
    result = run("status", "--url", url)
    assert result.exit_code == 2, (result.exit_code, result.output[-500:])
    assert "url" in result.output.splitlines()[-1] and "Traceback" not in result.output


def _daemon_on_sqlite(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``conveyor <args[0]> app:app <args[1:]>`` for an app on a SQLite file in ``tmp_path``."""
    (tmp_path / "app.py").write_text(
        f"from conveyor import Conveyor\napp = Conveyor('sqlite:///{tmp_path / 'jobs.db'}')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{tmp_path}"}
    return subprocess.run(
        [sys.executable, "-m", "conveyor.cli.main", args[0], "app:app", *args[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
