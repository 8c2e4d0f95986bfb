"""The worker processes a supervisor spawned: their slots, how one starts, is signalled and
reaped, and what its exit code means for its restart (``supervisor.py`` runs the loop).

Standard library only and import-light: the lean supervisor process (``python -m
conveyor.worker.supervisor``) imports it (``tests/worker/test_footprint.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from .procutil import EXIT_OK, EXIT_RECYCLE, EXIT_STUCK

CRASH_WINDOW = 10.0  # a child that dies sooner than this after start counts as crash-looping
MAX_BACKOFF = 30.0
_REASONS = {
    EXIT_RECYCLE: "job limit reached",
    EXIT_STUCK: "a job ignored its timeout",
    EXIT_OK: "recycled",
}


class Proc:
    """A spawned worker process: its pid and, once reaped, its exit code (``-N``: signal N)."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Reap the process if it has exited; its exit code, or None while it runs."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (e.g. a SIGCHLD handler): unknown code
                self.returncode = 255
                return self.returncode
            if pid == 0:
                return None
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class Child:
    """One supervised worker process slot."""

    __slots__ = ("crashes", "index", "proc", "restart_at", "started", "stopped", "term_sent_at")

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Proc | None = None
        self.started = 0.0
        self.term_sent_at: float | None = None
        self.crashes = 0
        self.restart_at = 0.0
        self.stopped = False  # an operator stopped it: never restarted


def spawn(child: Child, python: str, child_config: str, env: dict[str, str]) -> int:
    """Start ``python -m conveyor.worker.child CHILD_CONFIG`` in ``child``'s slot; its pid."""
    argv = [python, "-m", "conveyor.worker.child", child_config]
    # posix_spawn, not subprocess.Popen: subprocess (+ locale, selectors) would cost this
    # process ~1 MB. stdin from /dev/null, own process group, default SIGPIPE/SIGXFSZ (as
    # Popen's restore_signals); descriptors are close-on-exec by default (PEP 446).
    pid = os.posix_spawn(
        python,
        argv,
        env,
        setpgroup=0,
        file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)],
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )
    child.proc = Proc(pid)
    child.started = time.monotonic()
    child.term_sent_at = None
    return pid


def send(child: Child, sig: int) -> None:
    """Send ``sig`` to ``child``'s process if it still runs."""
    if child.proc is not None and child.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.proc.pid, sig)


def restart_plan(child: Child, code: int, lived: float) -> tuple[bool, str]:
    """After ``child`` exited with ``code`` having run ``lived`` seconds: whether the exit was
    planned (a recycle) and its reason. Sets ``child.restart_at``: 0 (at once) after a planned
    exit or a long run, else an exponential backoff up to ``MAX_BACKOFF`` (crash-looping)."""
    planned = code in (EXIT_RECYCLE, EXIT_STUCK) or (
        code == EXIT_OK and child.term_sent_at is not None
    )
    if planned or lived >= CRASH_WINDOW:
        child.crashes = 0
        child.restart_at = 0.0
    else:
        back_off(child)
    return planned, _REASONS.get(code, "crashed")


def back_off(child: Child) -> float:
    """Count one more crash (or failed start) of ``child`` in a row and schedule its restart
    after an exponential backoff (0.5 s doubled, at most ``MAX_BACKOFF``); the delay."""
    child.crashes += 1
    delay: float = min(MAX_BACKOFF, 0.5 * 2.0 ** (child.crashes - 1))
    child.restart_at = time.monotonic() + delay
    return delay
