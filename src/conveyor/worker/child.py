"""One worker process: ``python -m conveyor.worker.child [--unsupervised] CONFIG``.

The supervisor starts it as ``python -m conveyor.worker.child CONFIG``; ``conveyor worker
--no-supervisor`` execs ``... --unsupervised CONFIG`` (same pid, no parent watch). ``CONFIG`` is
a JSON ``ChildConfig``. The process imports the app (``module:attribute``), runs a
``Worker`` in its main thread (so SIGTERM/SIGINT drain it), stops gracefully if its parent dies,
and exits with the worker's code: 0 (stopped), 3 (recycle: job limit reached) or 4 (a job
ignored its timeout; the supervisor starts a fresh process). It imports neither click nor rich,
which keeps an idle worker small.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson

log = logging.getLogger("conveyor.worker")


@dataclass(frozen=True)
class ChildConfig:
    """Everything a worker process needs; travels as JSON on its command line."""

    app: str  # module:attribute
    queues: str | None = None  # None: the queues of the app's tasks (``task_queues``)
    concurrency: int = 32
    strict: bool = False
    visibility_timeout: float | None = None
    shutdown_timeout: float | None = None
    max_jobs: int | None = None
    log_format: str = "text"
    log_level: str = "INFO"
    sys_path: list[str] = field(default_factory=list)
    metrics: bool = False  # record MetricsMiddleware counters (``--metrics-port``)
    #: ``Worker(max_rate_limited=)``; absent from configs written before it existed
    max_rate_limited: int | None = 20

    def to_json(self) -> str:
        """Serialise for the command line."""
        return orjson.dumps(dataclasses.asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str) -> ChildConfig:
        """Parse what ``to_json`` wrote."""
        return cls(**orjson.loads(text))


def load_app_ref(target: str) -> Any:
    """Import ``module:attribute`` and return the Conveyor app (no CLI dependencies).

    The app is recognised by its runtime (``app.runtime``): this module never imports the
    facade's class.
    """
    from ..runtime import Runtime

    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not isinstance(getattr(obj, "runtime", None), Runtime):
        raise TypeError(f"{target!r} is not a Conveyor app")
    return obj


def find_app_ref(app: object) -> str | None:
    """``module:attribute`` under which ``app`` can be imported, if any (not ``__main__``)."""
    for name, module in list(sys.modules.items()):
        if module is None or name in ("__main__", "__mp_main__"):
            continue
        for attr, value in list(vars(module).items()):
            if value is app:
                return f"{name}:{attr}"
    return None


def _add_metrics_middleware(app: Any) -> None:
    try:
        from ..monitoring.metrics import MetricsMiddleware
    except ImportError as exc:
        log.warning("metrics middleware unavailable (%s): no worker counters", exc)
        return
    if not any(isinstance(mw, MetricsMiddleware) for mw in app.middleware):
        app.middleware.append(MetricsMiddleware())


def _watch_parent(worker: Any, parent: int) -> None:
    stopped = threading.Event()
    while not stopped.wait(1.0):
        if os.getppid() != parent:
            log.warning("supervisor (pid %d) is gone: draining and exiting", parent)
            worker.stop(wait=False)
            return


def main(argv: list[str] | None = None) -> None:
    """Entry point of a worker process: ``[--unsupervised] CONFIG``."""
    args = sys.argv[1:] if argv is None else argv
    supervised = args[0] != "--unsupervised"
    run_worker_process(ChildConfig.from_json(args[-1]), supervised=supervised)


def run_worker_process(config: ChildConfig, supervised: bool) -> None:
    """Run one worker in this process until it stops, then exit with its code.

    ``supervised=False`` (``conveyor worker --no-supervisor``) skips the parent watch: nobody
    restarts this process, so a stuck job's exit code is left to the process manager.
    """
    from .logs import setup_logging
    from .procutil import EXIT_APP, EXIT_OK, EXIT_STOPPED, EXIT_STUCK

    early: list[int] = []  # a stop signal before the worker runs: exit cleanly, do not die
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: early.append(signum))
    setup_logging(config.log_format, config.log_level)
    for path in reversed(config.sys_path):
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        app = load_app_ref(config.app)
    except Exception:
        log.exception("cannot load the app %r", config.app)
        sys.exit(EXIT_APP)
    if config.metrics:
        _add_metrics_middleware(app)
    worker = app.worker(
        config.queues,
        concurrency=config.concurrency,
        strict=config.strict,
        visibility_timeout=config.visibility_timeout,
        max_jobs=config.max_jobs,
        shutdown_timeout=config.shutdown_timeout,
        max_rate_limited=config.max_rate_limited,
    )
    if supervised:
        threading.Thread(
            target=_watch_parent,
            args=(worker, os.getppid()),
            daemon=True,
            name="conveyor-parent-watch",
        ).start()
    if early:
        log.info("stop signal during start-up: exiting")
        sys.exit(0)
    code = worker.run()
    if code == EXIT_OK and worker.stopped_by_operator:
        code = EXIT_STOPPED  # the supervisor leaves this slot empty instead of restarting it
    try:
        app.close()
    except Exception:
        log.debug("closing the broker failed", exc_info=True)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if code == EXIT_STUCK:
        os._exit(code)  # a job thread is still running and must not be waited for
    sys.exit(code)


if __name__ == "__main__":
    main()
