"""The supervisor: the process ``conveyor worker`` runs. It owns N worker processes.

* Starts ``processes`` children (``python -m conveyor.worker.child``), each in its own process
  group so a terminal's Ctrl-C reaches only the supervisor, which forwards it once.
* Restarts a child that exits while the supervisor is not stopping: at once after a planned
  recycle (exit 3: job limit; exit 4: a job ignored its timeout; exit 0 after a memory recycle),
  with exponential backoff (up to 30 s) when it keeps crashing soon after start.
* Recycles a child whose resident memory passes ``max_memory_mb``: SIGTERM (it drains), then a
  fresh one.
* SIGTERM / SIGINT: forwarded as SIGTERM to every child (they drain for ``shutdown_timeout``);
  a second signal is forwarded too (children release their jobs and exit now). Children still
  alive ``shutdown_timeout + 10`` s after the first signal are killed. Exits 0.
* SIGHUP: recycles every child gracefully (e.g. after deploying new code).
Children notice a dead supervisor (``kill -9``) within a second and drain themselves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from .child import ChildConfig
from .loop import EXIT_OK, EXIT_RECYCLE, EXIT_STUCK
from .registry import rss_bytes

if TYPE_CHECKING:
    from .loop import Worker

log = logging.getLogger("conveyor.supervisor")
KILL_MARGIN = 10.0  # seconds past shutdown_timeout before a child is killed
CRASH_WINDOW = 10.0  # a child that dies sooner than this after start counts as crash-looping
MAX_BACKOFF = 30.0


@dataclass
class _Child:
    """One supervised worker process slot."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    term_sent_at: float | None = None
    crashes: int = 0
    restart_at: float = 0.0


class Supervisor:
    """Run ``processes`` worker processes until signalled; see the module docstring."""

    def __init__(
        self,
        config: ChildConfig,
        processes: int = 1,
        *,
        max_memory_mb: float | None = None,
        shutdown_timeout: float = 30.0,
        python: str | None = None,
    ) -> None:
        self.config = config
        self.children = [_Child(i) for i in range(max(1, processes))]
        self.max_memory = int(max_memory_mb * 1024 * 1024) if max_memory_mb else None
        self.shutdown_timeout = shutdown_timeout
        self.python = python or sys.executable
        self.signals = 0
        self._forwarded = 0
        self._hup = False
        self._stop_at: float | None = None

    def pids(self) -> list[int]:
        """Process ids of the running children."""
        return [c.proc.pid for c in self.children if c.proc is not None and c.proc.poll() is None]

    def run(self) -> int:
        """Supervise until every child has exited after a stop signal; returns the exit code."""
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}  # fmt: skip
        log.info("supervisor %d: starting %d worker process(es) for %s", os.getpid(),
                 len(self.children), self.config.app)  # fmt: skip
        try:
            for child in self.children:
                self._spawn(child)
            last_memory_check = 0.0
            while True:
                self._handle_signals()
                for child in self.children:
                    self._check(child)
                if self.signals and all(c.proc is None for c in self.children):
                    break
                if self.max_memory and time.monotonic() - last_memory_check >= 1.0:
                    last_memory_check = time.monotonic()
                    self._check_memory()
                time.sleep(0.1)  # a signal cuts it short only via PEP 475 re-tries: fine
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
        log.info("supervisor %d: all worker processes stopped", os.getpid())
        return 0

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._hup = True
        else:
            self.signals += 1  # only plain assignments here: handlers must not take locks

    def _handle_signals(self) -> None:
        if self._hup and not self.signals:
            self._hup = False
            log.warning("SIGHUP: recycling every worker process")
            for child in self.children:
                self._terminate(child)
        while self._forwarded < self.signals:
            self._forwarded += 1
            if self._forwarded == 1:
                self._stop_at = time.monotonic() + self.shutdown_timeout + KILL_MARGIN
                log.warning("stop signal: worker processes drain for up to %gs; send it "
                            "again to release their jobs and exit now",
                            self.shutdown_timeout)  # fmt: skip
            elif self._forwarded == 2:
                log.warning("second stop signal: worker processes release their jobs now")
            for child in self.children:
                self._send(child, signal.SIGTERM)
        if self._stop_at is not None and time.monotonic() >= self._stop_at:
            for child in self.children:
                if child.proc is not None and child.proc.poll() is None:
                    log.error("worker process %d did not stop in time: killing it", child.proc.pid)
                    self._send(child, signal.SIGKILL)
            self._stop_at = None

    # ------------------------------------------------------------------ children
    def _spawn(self, child: _Child) -> None:
        cmd = [self.python, "-m", "conveyor.worker.child", self.config.to_json()]
        child.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, process_group=0)
        child.started = time.monotonic()
        child.term_sent_at = None
        log.info("worker process %d started (slot %d)", child.proc.pid, child.index)

    def _check(self, child: _Child) -> None:
        proc = child.proc
        if proc is None:
            if not self.signals and time.monotonic() >= child.restart_at:
                self._spawn(child)
            return
        if child.term_sent_at is not None and not self.signals:
            limit = self.shutdown_timeout + KILL_MARGIN
            if time.monotonic() - child.term_sent_at > limit and proc.poll() is None:
                log.error("worker process %d did not recycle in %gs: killing it", proc.pid, limit)
                self._send(child, signal.SIGKILL)
        code = proc.poll()
        if code is None:
            return
        child.proc = None
        if self.signals:
            log.info("worker process %d exited (code %d)", proc.pid, code)
            return
        lived = time.monotonic() - child.started
        planned = code in (EXIT_RECYCLE, EXIT_STUCK) or (code == EXIT_OK and child.term_sent_at)
        if planned or lived >= CRASH_WINDOW:
            child.crashes = 0
            child.restart_at = 0.0
        else:
            child.crashes += 1
            child.restart_at = time.monotonic() + min(MAX_BACKOFF, 0.5 * 2 ** (child.crashes - 1))
        reason = {EXIT_RECYCLE: "job limit reached", EXIT_STUCK: "a job ignored its timeout",
                  EXIT_OK: "recycled"}.get(code, "crashed")  # fmt: skip
        delay = f" in {child.restart_at - time.monotonic():.1f}s" if child.restart_at else ""
        log.log(logging.INFO if planned else logging.ERROR,
                "worker process %d exited with code %d (%s) after %.1fs: restarting%s",
                proc.pid, code, reason, lived, delay)  # fmt: skip
        if not child.restart_at:
            self._spawn(child)

    def _check_memory(self) -> None:
        assert self.max_memory is not None
        for child in self.children:
            if child.proc is None or child.term_sent_at is not None or self.signals:
                continue
            rss = rss_bytes(child.proc.pid)
            if rss > self.max_memory:
                log.warning("worker process %d uses %.0f MB (limit %.0f MB): recycling it",
                            child.proc.pid, rss / 2**20, self.max_memory / 2**20)  # fmt: skip
                self._terminate(child)

    def _terminate(self, child: _Child) -> None:
        if child.proc is not None and child.term_sent_at is None:
            child.term_sent_at = time.monotonic()
            self._send(child, signal.SIGTERM)

    @staticmethod
    def _send(child: _Child, sig: int) -> None:
        if child.proc is not None and child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.proc.pid, sig)


def supervise(worker: Worker) -> int:
    """Run ``worker.processes`` copies of a programmatic worker under a supervisor."""
    from ..errors import ValidationError
    from .child import find_app_ref

    ref = find_app_ref(worker.app)
    if ref is None:
        raise ValidationError("processes", "processes > 1 needs the app importable as module:"
                              "attribute; or run `conveyor worker APP --processes N`")
    queues = ",".join(f"{name}:{weight}" for name, weight in worker.selector.queues)
    config = ChildConfig(app=ref, queues=queues, concurrency=worker.concurrency,
                         strict=worker.selector.strict, max_jobs=worker.max_jobs,
                         visibility_timeout=worker.visibility_timeout, sys_path=list(sys.path),
                         shutdown_timeout=worker.shutdown_timeout)  # fmt: skip
    return Supervisor(config, worker.processes, shutdown_timeout=worker.shutdown_timeout).run()
