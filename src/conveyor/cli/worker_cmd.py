"""``conveyor worker APP``: run a supervisor and its worker processes (see docs/operations.md).

This process parses the options and checks the app, then *execs* a lean process in its place
(same pid, so signals and process managers see no difference): ``python -m
conveyor.worker.supervisor`` by default, ``python -m conveyor.worker.child --unsupervised`` with
``--no-supervisor``. Neither carries click, rich or this process's copy of the app, which keeps
idle memory low. With ``--metrics-port`` this process stays: it serves the metrics itself; so it
does under a debugger, profiler or coverage, and with ``CONVEYOR_WORKER_EXEC=0``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

import click

from ..core.job import MAX_DELAY
from ..core.queues import parse_queues
from ..errors import ValidationError
from ..worker.child import ChildConfig
from ..worker.logs import FORMATS, setup_logging
from ..worker.supervisor import Supervisor, options_args
from .common import AppCommand, Finite, app_option, load_app, require_app, setting_default

if TYPE_CHECKING:
    from ..app import Conveyor

log = logging.getLogger("conveyor.supervisor")
LEVELS = ("debug", "info", "warning", "error")


@click.command("worker", cls=AppCommand)
@app_option
@click.option(
    "-q",
    "--queues",
    default=None,
    help="Queues to serve, with optional weights: high:5,default,low "
    "[default: default plus every queue the app's tasks declare].",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(1, 10_000),
    default=32,
    show_default=True,
    help="Jobs each worker process runs at once.",
)
@click.option(
    "-p",
    "--processes",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="Worker processes to run (each with --concurrency slots).",
)
@click.option(
    "--strict", is_flag=True, help="Serve queues strictly in the given order (weights ignored)."
)
@click.option(
    "--visibility-timeout",
    type=Finite(min=1.0, max=MAX_DELAY),
    default=None,
    metavar="SECONDS",
    help="Lease length [default: CONVEYOR_VISIBILITY_TIMEOUT or "
    f"{setting_default('visibility_timeout'):g}].",
)
@click.option(
    "--shutdown-timeout",
    type=Finite(min=0.0, max=MAX_DELAY),
    default=None,
    metavar="SECONDS",
    help="How long in-flight jobs may finish after SIGTERM [default: "
    f"CONVEYOR_SHUTDOWN_TIMEOUT or {setting_default('shutdown_timeout'):g}].",
)
@click.option(
    "--max-jobs-per-child",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Replace a worker process after it has run N jobs.",
)
@click.option(
    "--max-rate-limited",
    type=click.IntRange(0, 49),
    default=20,
    show_default=True,
    metavar="N",
    help="The N-th RateLimited in a row of one job spends an attempt (0: never).",
)
@click.option(
    "--max-memory-per-child",
    type=Finite(min=1.0),
    default=None,
    metavar="MB",
    help="Replace a worker process whose resident memory passes MB.",
)
@click.option(
    "--log-format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text for people, json (one object per line) for log pipelines.",
)
@click.option("--log-level", type=click.Choice(LEVELS), default="info", show_default=True)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus metrics on this port (needs the dashboard extra).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics server listens on (loopback by default: it has no "
    "auth; pass 0.0.0.0 deliberately to expose it).",
)
@click.option(
    "--no-supervisor",
    is_flag=True,
    help="Run the one worker in this process (smallest footprint; no restarts or "
    "recycling: leave that to systemd/Kubernetes). Needs --processes 1.",
)
def worker_command(
    app_target: str | None,
    queues: str | None,
    concurrency: int,
    processes: int,
    strict: bool,
    visibility_timeout: float | None,
    shutdown_timeout: float | None,
    max_jobs_per_child: int | None,
    max_rate_limited: int,
    max_memory_per_child: float | None,
    log_format: str,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    no_supervisor: bool,
) -> None:
    """Run workers for APP (module:attribute). SIGTERM/SIGINT drain; a second one stops now."""
    app_target = require_app(app_target, "worker")
    setup_logging(log_format, log_level)
    try:
        if queues is not None:
            parse_queues(queues)
    except ValidationError as exc:
        raise click.BadParameter(str(exc), param_hint="--queues") from exc
    app = load_app(app_target)
    if app.broker.url.startswith("memory:"):
        raise click.UsageError(
            "the app uses memory://, which worker processes cannot share; "
            "use sqlite:///jobs.db or redis://"
        )
    shutdown = app.settings.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
    config = ChildConfig(
        app=app_target,
        queues=queues,
        concurrency=concurrency,
        strict=strict,
        visibility_timeout=visibility_timeout,
        shutdown_timeout=shutdown,
        max_jobs=max_jobs_per_child,
        log_format=log_format,
        log_level=log_level.upper(),
        sys_path=[os.getcwd()],
        metrics=metrics_port is not None,
        max_rate_limited=max_rate_limited or None,
    )
    if no_supervisor and (processes != 1 or max_memory_per_child is not None):
        raise click.UsageError(
            "--no-supervisor runs one process: it cannot be combined "
            "with --processes > 1 or --max-memory-per-child"
        )
    if metrics_port is None and _may_exec():
        _close_quietly(app)
        if no_supervisor:
            _exec("-m", "conveyor.worker.child", "--unsupervised", config.to_json())
        options = options_args(
            processes, max_memory_per_child, shutdown, log_format, log_level, app_target
        )
        _exec("-m", "conveyor.worker.supervisor", *options, config.to_json())
    if metrics_port is not None:
        start_metrics(app, metrics_port, metrics_host)
    if no_supervisor:
        from ..worker.child import run_worker_process

        run_worker_process(config, supervised=False)
    supervisor = Supervisor(
        config.to_json(),
        processes,
        app=app_target,
        max_memory_mb=max_memory_per_child,
        shutdown_timeout=shutdown,
    )
    sys.exit(supervisor.run())


def _may_exec() -> bool:
    """Exec the lean process unless something watches this one (a debugger, profiler or
    coverage: it would not follow the exec) or ``CONVEYOR_WORKER_EXEC=0`` asks not to."""
    watched = sys.gettrace() is not None or sys.getprofile() is not None
    return bool(sys.executable) and not watched and os.environ.get("CONVEYOR_WORKER_EXEC") != "0"


def _close_quietly(app: Conveyor) -> None:
    try:
        app.close()
    except Exception:
        log.debug("closing the app before exec failed", exc_info=True)


def _exec(*args: str) -> None:
    """Replace this process by ``python ARGS`` (same pid, stdio and environment)."""
    logging.shutdown()  # flush every handler before the image goes away
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *args])


def start_metrics(app: object, port: int, host: str) -> bool:
    """Serve Prometheus metrics from this (supervisor) process, if monitoring is installed."""
    try:
        from ..monitoring.prometheus import start_metrics_server
    except ImportError as exc:
        log.warning(
            "--metrics-port %d ignored: metrics are unavailable (%s); "
            "pip install 'conveyor-jobs[dashboard]'",
            port,
            exc,
        )
        return False
    start_metrics_server(app, port, host)  # type: ignore[arg-type]
    log.info("Prometheus metrics on http://%s:%d/metrics", host, port)
    return True


def register(group: click.Group) -> None:
    """Add ``worker`` to the CLI."""
    group.add_command(worker_command)
