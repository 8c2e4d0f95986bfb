"""A warm pool of child processes for ``executor="process"`` tasks: CPU-bound or must-be-killable.

Children are started once and reused; each runs one job at a time. They are forked by
multiprocessing's ``forkserver`` (a small single-threaded server process, so forking is safe
in a threaded worker and a replacement child starts in milliseconds; ``spawn`` where there is
no forkserver). A job names its function by module and qualified name — the child
imports the module and finds the function (unwrapping the ``Task`` the decorator left there), so
tasks must live at module level. A timeout kills the child (SIGKILL) and a new one replaces it;
a child that dies on its own (segfault, ``os._exit``) fails its job and is replaced too.

One dispatcher thread in the worker hands queued jobs to idle children and reads results.
Children exit when the worker dies (the forkserver exits with it; each child has a
parent-death signal on Linux, and sees EOF on its pipe).
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from .executors import Report
from .logs import active_config, configure_logging
from .mainguard import HELP, UnguardedMain, exit_unguarded, is_bootstrap_error
from .proc_job import RemoteError as RemoteError  # re-exported
from .proc_job import error_reply, exception_of, ok_reply, result_of, run_job
from .procutil import EXIT_UNGUARDED_MAIN
from .running import LEFT, Running

log = logging.getLogger("conveyor.worker")


class ChildProcessDied(Exception):
    """The child process running a job exited before sending a result."""


class _Slot:
    """One child process and the job it runs."""

    def __init__(self, ctx: Any, index: int) -> None:
        self.index = index
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=child_main,
            args=(child_conn, active_config()),  # the worker's log format, for user logs
            daemon=True,
            name=f"conveyor-proc-{index}",
        )
        self.proc.start()
        child_conn.close()
        self.ready = False
        self.dead = False
        self.respawn_at = 0.0
        self.run: Running | None = None


class ProcessPool:
    """``size`` warm children; jobs beyond that wait (their timeout starts when they start)."""

    def __init__(self, size: int, report: Report) -> None:
        self.size = max(1, size)
        self._report = report
        self._ctx = _context()
        self._pending: collections.deque[Running] = collections.deque()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        pipe: tuple[Connection, Connection] = self._ctx.Pipe(duplex=False)
        self._wake_r, self._wake_w = pipe
        self._stop = False
        self._thread: threading.Thread | None = None
        self._start_failures = 0  # children that died before they were ready, in a row
        self.unusable: UnguardedMain | None = None  # set once children re-run an unguarded main

    def start(self) -> None:
        """Start the children and the dispatcher thread (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            try:
                self._slots = [_Slot(self._ctx, i) for i in range(self.size)]
            except RuntimeError as exc:
                if is_bootstrap_error(exc):  # we ARE a pool child re-running an unguarded script
                    exit_unguarded()
                raise
            self._thread = threading.Thread(
                target=self._main, name="conveyor-procpool", daemon=True
            )
            self._thread.start()

    def submit(self, runs: Sequence[Running]) -> None:
        """Queue jobs for the next idle child."""
        if self.unusable is not None:
            for run in runs:
                self._report(run, None, self.unusable, None)
            return
        self.start()
        with self._lock:
            self._pending.extend(runs)
        self._poke()

    def interrupt(self, run: Running) -> None:
        """Kill the child running ``run``; the dispatcher reports the timeout."""
        with run.lock:
            run.interrupted = True
            slot = run.handle
        if isinstance(slot, _Slot) and slot.run is run:
            with contextlib.suppress(ProcessLookupError, OSError, AttributeError):
                slot.proc.kill()

    def abandon(self, run: Running) -> bool:
        """Killing always works: nothing else to do, no recycle."""
        self.interrupt(run)
        return False

    def shutdown(self) -> None:
        """Kill every child and stop the dispatcher."""
        self._stop = True
        self._poke()
        if self._thread is not None:
            self._thread.join(2.0)
        for slot in self._slots:
            with contextlib.suppress(Exception):
                slot.proc.kill()
                slot.proc.join(1.0)

    def pids(self) -> list[int]:
        """Process ids of the current children."""
        return [s.proc.pid for s in self._slots if s.proc.pid is not None and not s.dead]

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send_bytes(b"x")

    # ---------------------------------------------------------------- dispatcher thread
    def _main(self) -> None:
        while not self._stop:
            try:
                self._respawn_due()
                self._assign()
                self._wait_once()
            except Exception:
                log.exception("process pool dispatcher error")

    def _assign(self) -> None:
        with self._lock:
            for slot in self._slots:
                if not self._pending:
                    return
                if slot.ready and slot.run is None and not slot.dead:
                    run = self._pending.popleft()
                    if not run.settled:  # released (shutdown) while it waited
                        self._send(slot, run)

    def _send(self, slot: _Slot, run: Running) -> None:
        task, job = run.task, run.job
        assert task is not None
        run.handle = slot
        slot.run = run
        run.begin()
        fn = task.fn
        ref = (job.id, job.task, job.queue, job.attempts)  # the child's job context
        around = (run.around.worker.id, job) if run.around is not None else None
        msg = (
            job.id,
            fn.__module__,
            fn.__qualname__,
            task.is_async,
            job.args,
            job.kwargs,
            ref,
            around,
        )
        # If the child died, its sentinel fires and the job is reported there.
        with contextlib.suppress(OSError, ValueError):
            slot.conn.send(msg)

    def _wait_once(self) -> None:
        objects: list[Any] = [self._wake_r]
        timeout = 1.0
        for slot in self._slots:
            if slot.dead:
                timeout = min(timeout, max(0.01, slot.respawn_at - time.monotonic()))
            else:
                objects.extend((slot.conn, slot.proc.sentinel))
        for obj in wait(objects, timeout=timeout):
            if obj is self._wake_r:
                with contextlib.suppress(EOFError, OSError):
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
                continue
            found = next(
                (s for s in self._slots if not s.dead and obj in (s.conn, s.proc.sentinel)), None
            )
            if found is None:
                continue
            slot = found
            if obj is slot.conn:
                self._receive(slot)
            elif not slot.proc.is_alive() and not slot.dead:
                self._replace(slot)

    def _respawn_due(self) -> None:
        for i, slot in enumerate(self._slots):
            if slot.dead and not self._stop and time.monotonic() >= slot.respawn_at:
                with self._lock:
                    self._slots[i] = _Slot(self._ctx, i)

    def _receive(self, slot: _Slot) -> None:
        try:
            msg = slot.conn.recv()
        except (EOFError, OSError):
            self._replace(slot)
            return
        if msg[0] == "ready":
            slot.ready = True
            return
        run, slot.run = slot.run, None
        if run is None:
            return
        run.phase = LEFT
        if msg[0] == "ok":
            self._report(run, result_of(msg[2]), None, None)
        else:
            self._report(run, None, exception_of(msg), msg[5])

    def _replace(self, slot: _Slot) -> None:
        """A child died: report its job, and start another one (backing off if none starts)."""
        run, slot.run = slot.run, None
        slot.proc.join(1.0)
        code = slot.proc.exitcode
        with contextlib.suppress(Exception):
            slot.conn.close()
        slot.dead = True
        if not slot.ready and code == EXIT_UNGUARDED_MAIN:
            self._give_up(slot, run)
            return
        self._start_failures = 0 if slot.ready else self._start_failures + 1
        failures = self._start_failures
        backoff = min(30.0, 0.5 * 2 ** (failures - 1)) if failures else 0.0
        slot.respawn_at = time.monotonic() + backoff
        if failures >= 3:
            log.error(
                "process pool: %d children in a row died while starting (exit code %s); "
                "failing the queued process jobs",
                failures,
                code,
            )
            with self._lock:
                queued, self._pending = list(self._pending), collections.deque()
            for waiting in queued:
                self._report(
                    waiting,
                    None,
                    ChildProcessDied(f"the process pool cannot start a child (exit code {code})"),
                    None,
                )
        if run is not None:
            run.phase = LEFT
            if not run.interrupted:
                log.error(
                    "process executor child %s died (exit code %s) running job %s",
                    slot.proc.pid,
                    code,
                    run.job.id,
                )
            self._report(
                run, None, ChildProcessDied(f"child process exited with code {code}"), None
            )

    def _give_up(self, slot: _Slot, run: Running | None) -> None:
        """Children re-run a main script without the guard: no child can ever start here.

        Every job of the pool is reported with ``UnguardedMain`` (the worker releases them
        uncharged and stops); nothing is respawned.
        """
        main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
        self.unusable = UnguardedMain(f"{main}: {HELP}")
        slot.respawn_at = float("inf")
        with self._lock:
            queued, self._pending = list(self._pending), collections.deque()
        for waiting in ([run] if run is not None else []) + queued:
            waiting.phase = LEFT
            self._report(waiting, None, self.unusable, None)


# -------------------------------------------------------------------- child side
def child_main(conn: Connection, log_config: tuple[str, str | int] | None = None) -> None:
    """Loop in a child: receive a job, run it, send back the result or the exception."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when children stop
    _die_with_parent()
    if log_config is not None:
        configure_logging(*log_config)
    functions: dict[tuple[str, str], tuple[Any, Any]] = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        job_id, module, qualname, is_async, args, kwargs, ref, around = msg
        try:
            found = functions.get((module, qualname))
            if found is None:
                found = functions[(module, qualname)] = _resolve(module, qualname)
            result = run_job(found[0], found[1], is_async, args, kwargs, ref, around)
        except BaseException as exc:
            reply = error_reply(job_id, exc)
        else:
            reply = ok_reply(job_id, result)
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return


def _resolve(module_name: str, qualname: str) -> tuple[Any, Any]:
    """Find a task's function by module and qualified name: ``(function, its Task or None)``."""
    if "<locals>" in qualname:
        raise RuntimeError(
            f"{qualname} is not defined at module level: executor='process' "
            "tasks must be importable"
        )
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    fn = getattr(obj, "fn", None)
    return (obj, None) if fn is None else (fn, obj)


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the worker process dies (best effort)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(0)


def _context() -> Any:
    """``forkserver`` where available: one clean server process forks each child quickly (and
    safely, unlike ``fork`` in a threaded worker); ``spawn`` elsewhere."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
        return ctx
    return multiprocessing.get_context("spawn")
