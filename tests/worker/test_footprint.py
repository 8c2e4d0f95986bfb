"""Idle memory guards (issue 8): what the worker and supervisor processes import, and which
process ``conveyor worker`` leaves running. No timings: module sets and command lines only.

An idle worker's RSS is mostly the modules it imports, so a new top-level import of click,
rich, the dashboard stack, cron support or ``typing`` in the wrong module shows up here first.
Numbers: docs/benchmarks.md (idle RSS rows).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.worker.conftest import wait_until
from tests.worker.harness import WorkerProcess

REPO = Path(__file__).resolve().parents[2]

# Never in a worker process: the CLI, the dashboard stack, cron support, the read/alert APIs.
WORKER_NEVER = (
    "click",
    "rich",
    "starlette",
    "jinja2",
    "prometheus_client",
    "uvicorn",
    "croniter",
    "zoneinfo",
    "conveyor.cli",
    "conveyor.dashboard",
    "conveyor.scheduler",
    "conveyor.monitoring.prometheus",
    "conveyor.monitoring.inspect",
    "conveyor.monitoring.alerts",
    "conveyor.monitoring.rules",
    "conveyor.core.cron",
    "decimal",
    "ctypes",
)
# The supervisor process additionally never loads the app, the broker, the worker loop, or
# the heavier standard modules (it spawns with os.posix_spawn, not subprocess, and writes its
# log lines with conveyor.worker.leanlog, not logging).
SUPERVISOR_NEVER = (
    *WORKER_NEVER,
    "conveyor.app",
    "conveyor.broker",
    "conveyor.worker.loop",
    "conveyor.worker.child",
    "redis",
    "orjson",
    "asyncio",
    "typing",
    "dataclasses",
    "inspect",
    "subprocess",
    "selectors",
    "logging",
    "json",
    "re",
)


def _modules(code: str, **env: str) -> set[str]:
    """``sys.modules`` of a fresh interpreter after running ``code``."""
    script = f"{code}\nimport sys\nprint('MODULES', *sorted(sys.modules))"  # no json: it counts
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=True,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("MODULES "))
    return set(line.split()[1:])


def _loaded(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))


def test_supervisor_module_imports_the_standard_library_only() -> None:
    modules = _modules("import conveyor.worker.supervisor")
    assert _loaded(modules, SUPERVISOR_NEVER) == []
    assert {m for m in modules if m.startswith("conveyor")} == {
        "conveyor",
        "conveyor.core",
        "conveyor.core.escapes",  # stdlib only: the log lines' escapes (unicodedata lazily)
        "conveyor.worker",
        "conveyor.worker.leanlog",
        "conveyor.worker.procutil",
        "conveyor.worker.spawned",
        "conveyor.worker.supervisor",
    }


def test_package_import_is_lazy_and_the_public_api_still_works() -> None:
    assert _loaded(_modules("import conveyor, conveyor.worker"), ("conveyor.app", "typing")) == []
    modules = _modules(
        "from conveyor import Conveyor, JobState, Retry\n"
        "from conveyor.worker import Worker\n"
        "assert Conveyor.__name__ == 'Conveyor' and Worker.__name__ == 'Worker'\n"
        "import conveyor\nassert 'Task' in dir(conveyor)"
    )
    assert "conveyor.app" in modules


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "sqlite:///footprint.db"])
def test_worker_process_imports_only_what_it_runs(url: str, tmp_path: Path) -> None:
    """What ``python -m conveyor.worker.child`` loads for a plain sync app (no I/O happens)."""
    if url.startswith("redis"):
        pytest.importorskip("redis")
    code = (
        "import conveyor.worker.child as c\n"
        "app = c.load_app_ref('tests.worker.apps.jobs:app')\n"
        "worker = app.worker('default', concurrency=1024)\n"
    )
    url = url.replace("footprint.db", str(tmp_path / "footprint.db"))
    modules = _modules(code, CONVEYOR_URL=url)
    assert "conveyor.worker.loop" in modules  # the probe did build a worker
    banned = WORKER_NEVER
    if "opentelemetry.sdk" in modules:
        # redis-py >= 8 imports the OpenTelemetry SDK (and with it ctypes) when it is installed
        # (Conveyor's otel extra, and dev): redis's own import, not Conveyor's
        assert not any(m.startswith("conveyor.contrib") for m in modules)
        banned = tuple(b for b in WORKER_NEVER if b != "ctypes")
    assert _loaded(modules, banned) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "entry"),
    [
        ((), "-m conveyor.worker.supervisor"),
        (("--no-supervisor",), "-m conveyor.worker.child --unsupervised"),
    ],
)
def test_conveyor_worker_execs_a_lean_process_under_the_same_pid(
    args: tuple[str, ...], entry: str, tmp_path: Path
) -> None:
    """``conveyor worker`` checks the app, then becomes the lean process (same pid)."""
    w = WorkerProcess(f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path, "-c", "2", *args)
    try:
        cmdline: Any = wait_until(lambda: entry in _cmdline(w.pid) and _cmdline(w.pid), timeout=15)
        assert " worker tests.worker.apps.jobs:app" not in cmdline  # no longer the CLI
        w.wait_ready()
        w.signal(signal.SIGTERM)
        assert w.wait(timeout=10) == 0
    finally:
        w.close()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.parametrize("args", [(), ("--no-supervisor",)])
def test_exec_opt_out_keeps_the_cli_process(args: tuple[str, ...], tmp_path: Path) -> None:
    """``CONVEYOR_WORKER_EXEC=0`` (as under a debugger or profiler): the CLI process stays and
    supervises (or works) itself."""
    w = WorkerProcess(
        f"sqlite:///{tmp_path / 'jobs.db'}",
        tmp_path,
        "-c",
        "2",
        *args,
        env={"CONVEYOR_WORKER_EXEC": "0"},
    )
    try:
        w.wait_ready()
        assert " worker tests.worker.apps.jobs:app" in _cmdline(w.pid)
        assert ("started (slot 0)" in w.output()) is not bool(args)
        w.signal(signal.SIGTERM)
        assert w.wait(timeout=10) == 0
    finally:
        w.close()
