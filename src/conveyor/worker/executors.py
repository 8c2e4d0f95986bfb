"""Executors: where job code runs inside a worker process.

* ``ThreadExecutor``: a pool of daemon threads (started lazily, at most ``concurrency``) for
  plain functions; short jobs run back to back on one thread, blocking ones spread out. A
  timeout raises ``JobTimeout`` inside the job's thread.
* ``AsyncioExecutor``: ONE event loop in one thread for ``async def`` tasks, so hundreds of
  concurrent awaits cost no threads. A timeout cancels the job's asyncio task.
* ``ProcessPool`` (``procpool.py``): warm child processes for ``executor="process"``; a timeout
  kills the child, which is replaced.

Executors never classify outcomes: they report ``(running, result, exc)`` to a ``Report``
callback, and the worker turns that into an ``Outcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import JobCancelled, JobTimeout
from .logs import job_context
from .running import LEFT, RUNNING, Running
from .timeouts import clear_async_exception, inject_timeout

if TYPE_CHECKING:
    from ..core.job import Job
    from ..task import Task

log = logging.getLogger("conveyor.worker")

#: ``report(running, result, exc, remote_traceback)``: called once per started job.
Report = Callable[[Running, Any, BaseException | None, str | None], None]


class Executor(Protocol):
    """What the worker needs from an executor."""

    def submit(self, runs: Sequence[Running]) -> None:
        """Start (or queue) these jobs."""

    def interrupt(self, run: Running) -> None:
        """The job passed its deadline: stop it (it reports a timeout when it stops)."""

    def abandon(self, run: Running) -> bool:
        """It ignored the interruption: True if the worker process must be recycled."""

    def shutdown(self) -> None:
        """Stop accepting work and free resources (running jobs are not waited for)."""


class ThreadExecutor:
    """Up to ``size`` daemon threads taking jobs from one deque, each running them back to back.

    ``submit`` wakes ONE parked thread (or starts one). A thread that takes a job while more
    are queued wakes one more, unless a woken thread is already on its way. So a burst of short
    jobs runs back to back on the thread holding the GIL (one wake-up per burst, not per job),
    while jobs that block (I/O, sleep) release the GIL and let the next thread start the next
    job at once: every queued job gets a thread as soon as the running ones block.
    """

    def __init__(self, size: int, report: Report) -> None:
        self.size = size
        self._report = report
        self._jobs: deque[Running] = deque()
        self._lock = threading.Lock()
        self._parked: list[threading.Lock] = []  # idle threads, each blocked on its own gate
        self._threads: list[threading.Thread] = []
        self._waking = 0  # threads woken (or started) that have not looked at the deque yet
        self._closed = False

    def submit(self, runs: Sequence[Running]) -> None:
        """Queue the jobs and make sure a thread is coming for them."""
        self._jobs.extend(runs)
        if runs:
            self._wake_one()

    def _wake_one(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._parked:
                self._waking += 1
                self._parked.pop().release()
            elif len(self._threads) < self.size:
                self._waking += 1
                gate = threading.Lock()
                gate.acquire()
                name = f"conveyor-job-{len(self._threads) + 1}"
                thread = threading.Thread(target=self._main, args=(gate,), name=name, daemon=True)
                self._threads.append(thread)
                thread.start()
            # else every thread is busy or about to look at the deque: one of them takes it

    def _main(self, gate: threading.Lock) -> None:
        jobs, report, call = self._jobs, self._report, self._call
        woken = True
        while True:
            try:
                run = jobs.popleft()
            except IndexError:
                with self._lock:
                    if woken:
                        self._waking -= 1
                        woken = False
                    if jobs:
                        continue
                    if self._closed:
                        return
                    self._parked.append(gate)
                gate.acquire()  # parked until _wake_one (or shutdown) releases the gate
                woken = True
                continue
            if woken:
                with self._lock:
                    self._waking -= 1
                woken = False
            if jobs and not self._waking:
                self._wake_one()  # more are queued: one more thread, in case this one blocks
            if run.settled:  # released (shutdown) before it started
                continue
            try:
                result, exc = call(run)
                report(run, result, exc, None)
            except BaseException:
                log.exception("job thread: unexpected error around job %s", run.job.id)

    @staticmethod
    def _call(run: Running) -> tuple[Any, BaseException | None]:
        task, job = run.task, run.job
        assert task is not None
        token = job_context.set(job)  # the job-context log filter reads it (worker/logs.py)
        if not run.begin(threading.get_ident()):  # cancelled before it started
            job_context.reset(token)
            return None, None
        try:
            try:
                if run.around is not None:
                    result = run.around.call(job, partial(_invoke, task, job))
                elif task.is_async:
                    result = asyncio.run(task.fn(*job.args, **job.kwargs))
                else:
                    result = task.fn(*job.args, **job.kwargs)
            finally:
                _leave(run)
        except BaseException as exc:
            _leave(run)
            job_context.reset(token)
            return None, exc
        job_context.reset(token)
        return result, None

    def interrupt(self, run: Running) -> None:
        """Raise ``JobTimeout`` inside the job's thread (at its next Python bytecode)."""
        interrupt_thread(run)

    def abandon(self, run: Running) -> bool:
        """A thread cannot be killed: the process must be recycled."""
        return True

    def shutdown(self) -> None:
        """Let idle threads exit (busy daemon threads die with the process)."""
        with self._lock:
            self._closed = True
            parked, self._parked = self._parked, []
        for gate in parked:
            gate.release()


def _invoke(task: Task[..., Any], job: Job) -> Any:
    """Call the task function here (an async one on a fresh event loop)."""
    if task.is_async:
        return asyncio.run(task.fn(*job.args, **job.kwargs))
    return task.fn(*job.args, **job.kwargs)


def call_in_thread(run: Running) -> tuple[Any, BaseException | None]:
    """Run ``run``'s job in the calling thread, interruptible by ``interrupt_thread``."""
    return ThreadExecutor._call(run)


def interrupt_thread(run: Running) -> None:
    """Raise ``JobTimeout`` (``JobCancelled`` for a cancel) inside the thread running ``run``
    (at its next Python bytecode)."""
    with run.lock:
        if run.phase == RUNNING and run.thread_ident is not None and not run.interrupted:
            run.interrupted = True
            exc_type = JobCancelled if run.cancel_requested else JobTimeout
            inject_timeout(run.thread_ident, exc_type)
        else:
            run.interrupted = True


def _leave(run: Running) -> None:
    """The job's call returned: no more interruptions; drop one that is still pending."""
    with run.lock:  # any job may be interrupted (a cancel): always under the lock
        if run.phase == LEFT:
            return
        run.phase = LEFT
        if run.interrupted:
            clear_async_exception()


class AsyncioExecutor:
    """One event loop in one daemon thread; each job is an asyncio task on it."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The executor's loop, started on first use."""
        with self._lock:
            if self._loop is None:
                ready = threading.Event()
                loop = asyncio.new_event_loop()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=main, name="conveyor-asyncio", daemon=True)
                self._thread.start()
                ready.wait(10)
                self._loop = loop
            return self._loop

    def submit(self, runs: Sequence[Running]) -> None:
        """Start the jobs on the loop (one thread-safe call per batch)."""
        self.loop.call_soon_threadsafe(self._start, list(runs))

    def _start(self, runs: list[Running]) -> None:
        create_task, add, run_job = self.loop.create_task, self._tasks.add, self._run
        for run in runs:
            if run.settled:
                continue
            task = create_task(run_job(run))
            run.handle = task
            add(task)  # dropped by _run itself when it ends (no done callback per job)

    async def _run(self, run: Running) -> None:
        task, job = run.task, run.job
        assert task is not None
        if not run.begin():  # cancelled before it started
            self._tasks.discard(run.handle)
            return
        job_context.set(job)  # this asyncio task's own context: nothing to reset
        result: Any = None
        error: BaseException | None = None
        try:
            if run.around is not None:
                # partial, not a lambda: a closure would make these locals cells for every job
                result = await run.around.acall(job, partial(task.fn, *job.args, **job.kwargs))
            else:
                result = await task.fn(*job.args, **job.kwargs)
        except BaseException as exc:
            error = exc
        run.phase = LEFT
        self._tasks.discard(run.handle)
        try:
            self._report(run, result, error, None)
        except Exception:
            log.exception("asyncio executor: reporting job %s failed", job.id)

    def interrupt(self, run: Running) -> None:
        """Cancel the job's asyncio task."""
        with run.lock:
            run.interrupted = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(_cancel, run)

    def abandon(self, run: Running) -> bool:
        """A coroutine that ignores cancellation (or blocks the loop): recycle the process."""
        return True

    def shutdown(self) -> None:
        """Cancel what is left and stop the loop."""
        loop = self._loop
        if loop is None:
            return

        def stop() -> None:
            for task in list(self._tasks):
                task.cancel()
            loop.call_soon(loop.stop)

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(stop)
        if self._thread is not None:
            self._thread.join(2.0)


def _cancel(run: Running) -> None:
    handle = run.handle
    if isinstance(handle, asyncio.Task) and not handle.done():
        handle.cancel()


def make_executor(kind: str, size: int, report: Report) -> Executor:
    """The executor for ``kind`` (thread, asyncio or process) with ``size`` slots."""
    if kind == "asyncio":
        return AsyncioExecutor(report)
    if kind == "process":
        from .procpool import ProcessPool

        return ProcessPool(size, report)
    return ThreadExecutor(size, report)
