"""The supervisor: the process ``conveyor worker`` becomes. It owns N worker processes.

* Starts ``processes`` children (``python -m conveyor.worker.child``), each in its own process
  group so a terminal's Ctrl-C reaches only the supervisor, which forwards it once.
* Restarts a child that exits while the supervisor is not stopping: at once after a planned
  recycle (exit 3: job limit; exit 4: a job ignored its timeout; exit 0 after a memory recycle),
  with exponential backoff (up to 30 s) when it keeps crashing soon after start. A child that
  exits with code 5 (the broker refused the credentials or configuration) is not restarted:
  the supervisor stops every child and exits 5. A child that exits with code 7 was stopped by
  an operator (the dashboard's STOP, ``control.py``): its slot stays empty, and once every slot
  is empty that way the supervisor exits 0. Children get ``CONVEYOR_WORKER_GROUP`` (this
  supervisor's host, pid and start time) and publish it, so a Stop of the group reaches all.
* Recycles a child whose resident memory passes ``max_memory_mb``: SIGTERM (it drains), then a
  fresh one.
* SIGTERM / SIGINT: forwarded as SIGTERM to every child (they drain for ``shutdown_timeout``);
  a second signal is forwarded too (children release their jobs and exit now). Children still
  alive ``shutdown_timeout + 10`` s after the first signal are killed. Exits 0.
* SIGHUP: recycles every child gracefully (e.g. after deploying new code).
Children notice a dead supervisor (``kill -9``) within a second and drain themselves.

**Lean by design.** ``conveyor worker`` parses its options, checks the app, then *execs*
``python -m conveyor.worker.supervisor [OPTIONS] CHILD_CONFIG`` (same pid), so the process that
stays resident never imported click, rich, the broker client or the app. This module imports a
few standard modules only (no ``typing``, ``dataclasses``, ``subprocess``, ``logging`` or
``json``: ~9.7 MB resident instead of ~11.5 MB) plus ``procutil``, ``spawned`` (the children:
spawning, signalling, restart policy) and ``leanlog``, which writes
the same log lines as ``conveyor.worker.logs``. ``tests/worker/test_footprint.py`` guards that.
In-process use (``supervise()``, ``conveyor worker --metrics-port``) logs through ``logging``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from .leanlog import LeanLogger
from .procutil import EXIT_CONFIG, EXIT_OK, EXIT_STOPPED, GROUP_ENV, PROCESSES_ENV, rss_bytes
from .spawned import CRASH_WINDOW as CRASH_WINDOW  # re-exported: the reliability harness
from .spawned import MAX_BACKOFF as MAX_BACKOFF
from .spawned import Child, back_off, restart_plan, send, spawn

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs this process ~0.6 MB
if TYPE_CHECKING:
    from logging import Logger
    from types import FrameType

    from ..core.queues import QueueSelector

LOGGER = "conveyor.supervisor"
INFO, ERROR = 20, 40  # logging's levels
KILL_MARGIN = 10.0  # seconds past shutdown_timeout before a child is killed


class Supervisor:
    """Run ``processes`` worker processes until signalled; see the module docstring.

    ``child_config`` is a ``ChildConfig`` as JSON (``ChildConfig.to_json()``), passed verbatim
    to every ``python -m conveyor.worker.child``; ``app`` names it in the log. ``log`` defaults
    to the ``conveyor.supervisor`` logger of the ``logging`` package.
    """

    def __init__(
        self,
        child_config: str,
        processes: int = 1,
        *,
        app: str = "the app",
        max_memory_mb: float | None = None,
        shutdown_timeout: float = 30.0,
        python: str | None = None,
        log: Logger | LeanLogger | None = None,
    ) -> None:
        if log is None:
            import logging

            log = logging.getLogger(LOGGER)
        self.log = log
        self.child_config = child_config
        self.app = app
        self.children = [Child(i) for i in range(max(1, processes))]
        self.max_memory = int(max_memory_mb * 1024 * 1024) if max_memory_mb else None
        self.shutdown_timeout = shutdown_timeout
        self.python = python or sys.executable
        self.signals = 0
        self._forwarded = 0
        self._hup = False
        self._stop_at: float | None = None
        self.exit_code = EXIT_OK  # EXIT_CONFIG once a child reported a refused configuration
        # children name this invocation in their heartbeats: an operator's Stop reaches them all
        group = f"{os.uname().nodename}:{os.getpid()}:{int(time.time())}"
        self.env = {**os.environ, GROUP_ENV: group, PROCESSES_ENV: str(len(self.children))}

    def pids(self) -> list[int]:
        """Process ids of the running children."""
        return [c.proc.pid for c in self.children if c.proc is not None and c.proc.poll() is None]

    def run(self) -> int:
        """Supervise until every child has exited after a stop signal; returns the exit code."""
        previous = {
            sig: signal.signal(sig, self._on_signal)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        self.log.info(
            "supervisor %d: starting %d worker process(es) for %s",
            os.getpid(),
            len(self.children),
            self.app,
        )
        try:
            for child in self.children:
                self._spawn(child)
            last_memory_check = 0.0
            while True:
                self._handle_signals()
                for child in self.children:
                    self._check(child)
                if all(c.proc is None for c in self.children) and (
                    self.signals or all(c.stopped for c in self.children)
                ):
                    break
                if self.max_memory and time.monotonic() - last_memory_check >= 1.0:
                    last_memory_check = time.monotonic()
                    self._check_memory()
                time.sleep(0.1)  # a signal cuts it short only via PEP 475 re-tries: fine
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
        self.log.info("supervisor %d: all worker processes stopped", os.getpid())
        return self.exit_code

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._hup = True
        else:
            self.signals += 1  # only plain assignments here: handlers must not take locks

    def _handle_signals(self) -> None:
        if self._hup and not self.signals:
            self._hup = False
            self.log.warning("SIGHUP: recycling every worker process")
            for child in self.children:
                self._terminate(child)
        while self._forwarded < self.signals:
            self._forwarded += 1
            if self._forwarded == 1:
                self._stop_at = time.monotonic() + self.shutdown_timeout + KILL_MARGIN
                self.log.warning(
                    "stop signal: worker processes drain for up to %gs; send it "
                    "again to release their jobs and exit now",
                    self.shutdown_timeout,
                )
            elif self._forwarded == 2:
                self.log.warning("second stop signal: worker processes release their jobs now")
            for child in self.children:
                self._send(child, signal.SIGTERM)
        if self._stop_at is not None and time.monotonic() >= self._stop_at:
            for child in self.children:
                if child.proc is not None and child.proc.poll() is None:
                    self.log.error(
                        "worker process %d did not stop in time: killing it", child.proc.pid
                    )
                    self._send(child, signal.SIGKILL)
            self._stop_at = None

    # ------------------------------------------------------------------ children
    def _spawn(self, child: Child) -> None:
        try:
            pid = spawn(child, self.python, self.child_config, self.env)
        except OSError as exc:  # the interpreter gone after a deploy, EAGAIN, ENOMEM: retry
            self.log.error(
                "could not start a worker process (slot %d): %s; retrying in %.1fs",
                child.index,
                exc,
                back_off(child),
            )
            return
        self.log.info("worker process %d started (slot %d)", pid, child.index)

    def _check(self, child: Child) -> None:
        proc = child.proc
        if proc is None:
            if not self.signals and not child.stopped and time.monotonic() >= child.restart_at:
                self._spawn(child)
            return
        if child.term_sent_at is not None and not self.signals:
            limit = self.shutdown_timeout + KILL_MARGIN
            if time.monotonic() - child.term_sent_at > limit and proc.poll() is None:
                self.log.error(
                    "worker process %d did not recycle in %gs: killing it", proc.pid, limit
                )
                self._send(child, signal.SIGKILL)
        code = proc.poll()
        if code is None:
            return
        child.proc = None
        if self.signals:
            self.log.info("worker process %d exited (code %d)", proc.pid, code)
            return
        if code == EXIT_CONFIG:  # the broker refused the credentials: a restart cannot help
            self.log.error(
                "worker process %d exited with a configuration error (e.g. the "
                "broker refused the credentials; see its log above): stopping every "
                "worker",
                proc.pid,
            )
            self.exit_code = EXIT_CONFIG
            self.signals += 1  # stop the others as if a stop signal came
            return
        if code == EXIT_STOPPED:
            self.log.info("worker process %d stopped by an operator: not restarting it", proc.pid)
            child.stopped = True
            return
        lived = time.monotonic() - child.started
        planned, reason = restart_plan(child, code, lived)
        delay = f" in {child.restart_at - time.monotonic():.1f}s" if child.restart_at else ""
        self.log.log(
            INFO if planned else ERROR,
            "worker process %d exited with code %d (%s) after %.1fs: restarting%s",
            proc.pid,
            code,
            reason,
            lived,
            delay,
        )
        if not child.restart_at:
            self._spawn(child)

    def _check_memory(self) -> None:
        assert self.max_memory is not None
        for child in self.children:
            if child.proc is None or child.term_sent_at is not None or self.signals:
                continue
            rss = rss_bytes(child.proc.pid)
            if rss > self.max_memory:
                self.log.warning(
                    "worker process %d uses %.0f MB (limit %.0f MB): recycling it",
                    child.proc.pid,
                    rss / 2**20,
                    self.max_memory / 2**20,
                )
                self._terminate(child)

    def _terminate(self, child: Child) -> None:
        if child.proc is not None and child.term_sent_at is None:
            child.term_sent_at = time.monotonic()
            self._send(child, signal.SIGTERM)

    @staticmethod
    def _send(child: Child, sig: int) -> None:
        send(child, sig)


def options_args(
    processes: int,
    max_memory_mb: float | None,
    shutdown_timeout: float,
    log_format: str,
    log_level: str,
    app: str,
) -> list[str]:
    """The OPTIONS of ``python -m conveyor.worker.supervisor [OPTIONS] CHILD_CONFIG``."""
    args = [
        "--processes",
        str(processes),
        "--shutdown-timeout",
        repr(shutdown_timeout),
        "--log-format",
        log_format,
        "--log-level",
        log_level,
        "--app",
        app,
    ]
    if max_memory_mb is not None:
        args += ["--max-memory-mb", repr(max_memory_mb)]
    return args


def main(argv: list[str] | None = None) -> None:
    """Entry point of the supervisor process: ``[OPTIONS] CHILD_CONFIG`` (``options_args()``)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) % 2 != 1 or not all(a.startswith("--") for a in args[:-1:2]):
        sys.exit("usage: python -m conveyor.worker.supervisor [--OPTION VALUE ...] CHILD_CONFIG")
    opts = {key[2:]: value for key, value in zip(args[:-1:2], args[1:-1:2], strict=True)}
    log = LeanLogger(LOGGER, opts.get("log-format", "text"), opts.get("log-level", "info"))
    memory = opts.get("max-memory-mb")
    supervisor = Supervisor(
        args[-1],
        int(opts.get("processes", "1")),
        app=opts.get("app", "?"),
        max_memory_mb=float(memory) if memory else None,
        shutdown_timeout=float(opts.get("shutdown-timeout", "30")),
        log=log,
    )
    sys.exit(supervisor.run())


def supervise(
    app: object,
    processes: int,
    selector: QueueSelector,
    concurrency: int,
    max_jobs: int | None,
    visibility_timeout: float,
    shutdown_timeout: float,
    max_rate_limited: int | None = 20,
) -> int:
    """Run ``processes`` copies of a programmatic worker (of ``app``) under a supervisor."""
    from ..errors import ValidationError
    from .child import ChildConfig, find_app_ref

    ref = find_app_ref(app)
    if ref is None:
        raise ValidationError(
            "processes",
            "processes > 1 needs the app importable as module:"
            "attribute; or run `conveyor worker APP --processes N`",
        )
    queues = ",".join(f"{name}:{weight}" for name, weight in selector.queues)
    config = ChildConfig(
        app=ref,
        queues=queues,
        concurrency=concurrency,
        strict=selector.strict,
        max_jobs=max_jobs,
        visibility_timeout=visibility_timeout,
        sys_path=list(sys.path),
        shutdown_timeout=shutdown_timeout,
        max_rate_limited=max_rate_limited,
    )
    return Supervisor(config.to_json(), processes, app=ref, shutdown_timeout=shutdown_timeout).run()


if __name__ == "__main__":
    main()
