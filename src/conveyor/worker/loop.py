"""Worker: claim jobs from the broker, run them, record outcomes.

Two ways to drive it:

* ``process_next(now)`` / ``run_until_idle(now)``: one job at a time, inline, on the caller's
  thread, with time passed in — deterministic tests and simulations.
* ``run()``: the production loop. This thread claims (in batches, never more jobs than free
  slots: ``slots.py``) and hands each job to its executor (thread pool, one asyncio loop, or a
  warm process pool); when a claim comes back empty it waits for work until the next due time
  the claim reported (a delayed job, a retry, a lease deadline) or ``poll_interval``, whichever
  is sooner, and is woken early by new work; a recorder thread writes outcomes (successes
  coalesced into batch ``complete`` calls); a lease keeper extends all in-flight leases in one
  call every ``visibility_timeout / 3``; a watchdog enforces timeouts; a heartbeat keeps the
  worker registry entry alive. ``stop()`` (or SIGTERM/SIGINT in the main thread) drains;
  ``stop_now()`` (or a second signal) releases at once. ``run()`` returns ``EXIT_OK``,
  ``EXIT_RECYCLE`` (job limit) or ``EXIT_STUCK`` (a job ignored its timeout).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.ids import new_ulid
from ..core.queues import parse_queues, task_queues
from ..middleware import emit
from ..outage import OutageLog
from ..runtime import HasRuntime, Runtime, as_runtime
from . import ratecap
from .cancel import CANCELLED, stop_job
from .claimloop import ClaimLoop
from .execute import OK, Outcome, reported
from .executors import Executor
from .helpers import Wiring, broker_accepts, start_helpers, stop_helpers
from .inline_mode import InlineMode
from .jobctx import JobBoard
from .mainguard import UnguardedMain, exit_unguarded, explain, in_bootstrapping_child
from .options import count, seconds, worker_identifier
from .presence import describe
from .procutil import EXIT_CONFIG as EXIT_CONFIG
from .procutil import EXIT_OK as EXIT_OK  # re-exported: callers import the codes from here
from .procutil import EXIT_RECYCLE as EXIT_RECYCLE
from .procutil import EXIT_STUCK as EXIT_STUCK
from .recorder import Recorder
from .running import Running
from .shard_discovery import DiscoveringSelector
from .shutdown import stop_on_signals
from .slots import Slots

if TYPE_CHECKING:
    from .timeouts import Watchdog

log = logging.getLogger("conveyor.worker")


class Worker(ClaimLoop, InlineMode):
    """Runs jobs of some queues; see the module docstring for the two driving modes."""

    def __init__(
        self,
        app: Runtime | HasRuntime,
        queues: Sequence[str] | str | None = None,
        *,
        concurrency: int = 1,
        processes: int = 1,
        strict: bool = False,
        visibility_timeout: float | None = None,
        worker_id: str | None = None,
        max_lost: int | None = None,
        shutdown_timeout: float | None = None,
        max_jobs: int | None = None,
        process_pool_size: int | None = None,
        heartbeat: bool = True,
        handle_signals: bool = True,
        max_rate_limited: int | None = ratecap.DEFAULT_MAX_RATE_LIMITED,
    ) -> None:
        self.runtime = rt = as_runtime(app)
        self.app: Any = rt.owner  # the facade, for middleware that reads ``worker.app``
        self.broker = rt.broker
        #: where the queues came from: "given" (``queues=`` / ``--queues``) or the app's tasks
        self.queue_source = "given" if queues is not None else "the app's tasks"
        spec = queues if queues is not None else task_queues(rt.tasks.values())
        # sharded queues (issue 18) expand to their shards, declared here or found stored
        self.selector = DiscoveringSelector(
            parse_queues(spec), strict, rt.shards, rt.broker.queues, rt.now
        )
        self.concurrency = count(concurrency, "concurrency") or 1
        self.processes = count(processes, "processes") or 1
        settings = rt.settings
        lease = seconds(visibility_timeout, "visibility_timeout", zero_ok=True)
        self.visibility_timeout = lease or settings.visibility_timeout  # 0: the default
        self.max_lost = count(max_lost, "max_lost", zero_is_default=True) or settings.max_lost
        drain = seconds(shutdown_timeout, "shutdown_timeout", zero_ok=True)
        self.shutdown_timeout = settings.shutdown_timeout if drain is None else drain
        self.max_jobs = count(max_jobs, "max_jobs", zero_is_default=True)
        self.process_pool_size = count(
            process_pool_size, "process_pool_size", zero_is_default=True
        ) or min(self.concurrency, os.cpu_count() or 1)
        self.heartbeat, self.handle_signals = heartbeat, handle_signals
        suffix = new_ulid(rt.now(), rt.id_rng)[-6:]
        self.id = worker_identifier(worker_id) or f"{socket.gethostname()}:{os.getpid()}:{suffix}"
        self._hard = threading.Event()
        self.recorder = Recorder(
            self,
            self.id,
            rt.broker,
            rt.middleware,
            rt.now,
            settings.max_result_bytes,
            self._hard.is_set,
        )
        self.max_rate_limited = self.recorder.max_rate_limited = ratecap.checked(max_rate_limited)
        self.exit_code = EXIT_OK
        self.started_at: float | None = None
        self._last_reap = -1e18
        self._reap_failures, self._reap_retry_at = 0, -1e18
        self._stopping = threading.Event()
        self._quiet = threading.Event()  # an operator asked: claim nothing new (control.py)
        self.stopped_by_operator = False  # a ``stop`` command: a supervisor does not restart it
        self._finished = threading.Event()
        self._finished.set()
        self._slots = Slots(self.concurrency)
        self._done: queue.SimpleQueue[tuple[Running, Outcome] | None] = queue.SimpleQueue()
        self.board = JobBoard(rt.broker, rt.now)  # current_job() contexts and their progress
        self._executors: dict[str, Executor] = {}
        self._watchdog: Watchdog | None = None
        self._run_thread: int | None = None
        self._claim_errors = 0
        self._outage = OutageLog.shared(self.broker)  # one line per outage, not per retry
        self._guard_lock = threading.Lock()
        self._guard_reported = False  # the missing __main__ guard was logged

    @property
    def queues(self) -> list[str]:
        """The queue names this worker serves."""
        return list(self.selector.names)

    @property
    def processed(self) -> int:
        """Jobs completed by this worker."""
        return self.recorder.processed

    @property
    def failed(self) -> int:
        """Attempts that failed (retried, dead-lettered, timed out or lost)."""
        return self.recorder.failed

    @property
    def hard_stopping(self) -> bool:
        """True once ``stop_now()`` was called."""
        return self._hard.is_set()

    # ------------------------------------------------------------------ production mode
    def run(self) -> int:
        """Claim and run jobs until stopped; returns the exit code (see the module docstring).

        With ``processes > 1`` this process becomes a supervisor of that many worker processes
        (the app must be importable as ``module:attribute``; main thread only).
        """
        if in_bootstrapping_child():  # a pool child re-running an unguarded script: stop now
            exit_unguarded()
        if self.processes > 1:
            from .supervisor import supervise

            return supervise(
                self.app,
                self.processes,
                self.selector,
                self.concurrency,
                self.max_jobs,
                self.visibility_timeout,
                self.shutdown_timeout,
                self.max_rate_limited,
            )
        # a wrong password or database: retrying cannot help
        if not broker_accepts(self.broker, self.id):
            self.exit_code = EXIT_CONFIG
            return EXIT_CONFIG
        self._stopping.clear()
        self._quiet.clear()
        self.stopped_by_operator = False
        self._hard.clear()
        self._finished.clear()
        self._slots = Slots(self.concurrency)
        self._run_thread = threading.get_ident()
        self.exit_code = EXIT_OK
        self.started_at = self.runtime.now()
        gc.collect()
        gc.freeze()  # the app, its imports and tasks: never traversed by the collector again
        signals = stop_on_signals(self) if self.handle_signals else contextlib.nullcontext()
        with signals:  # first: a signal during start-up must drain, not kill
            helpers = start_helpers(self.recorder, self._wiring())
            self._watchdog = helpers.watchdog
            emit(self.runtime.middleware, "on_worker_start", self)
            log.info(
                "worker %s: queues=%s (%s) concurrency=%d visibility_timeout=%gs",
                self.id,
                ",".join(self.queues),
                self.queue_source,
                self.concurrency,
                self.visibility_timeout,
            )
            try:
                self._claim_loop()
                self._drain()
            finally:
                stop_helpers(helpers, self._done, self._executors)
                emit(self.runtime.middleware, "on_worker_stop", self)
                log.info(
                    "worker %s stopped: processed=%d failed=%d exit_code=%d",
                    self.id,
                    self.processed,
                    self.failed,
                    self.exit_code,
                )
                self._finished.set()
        return self.exit_code

    def stop(self, timeout: float | None = None, *, wait: bool = True) -> None:
        """Drain: no new claims; in-flight jobs get ``timeout`` s (default shutdown_timeout).

        With ``wait`` (and from another thread than ``run()``'s), returns once drained. A
        ``timeout`` that is not finite seconds >= 0 is a ``ValidationError``, raised before
        anything changes (the run thread's drain reads it).
        """
        budget = seconds(timeout, "timeout", zero_ok=True)
        if budget is not None:
            self.shutdown_timeout = budget
        self._stopping.set()
        self._slots.wake()
        if wait and threading.get_ident() != self._run_thread:
            self._finished.wait(self.shutdown_timeout + 5.0)

    def stop_now(self, code: int | None = None) -> None:
        """Release every in-flight lease at once and return from ``run()``."""
        if code is not None:
            self.exit_code = code
        self._hard.set()
        self.stop(wait=False)

    def running_jobs(self) -> list[Running]:
        """The in-flight attempts (a snapshot)."""
        return self._slots.snapshot()

    @property
    def draining(self) -> bool:
        """True once asked to stop (no new claims)."""
        return self._stopping.is_set()

    @property
    def quiet(self) -> bool:
        """True once an operator asked this worker to claim nothing new."""
        return self._quiet.is_set()

    def _on_command(self, command: str) -> None:
        """A control command read by the heartbeat: ``quiet`` stops claiming, ``stop`` drains."""
        if command == "stop" and not self._stopping.is_set():
            log.info("worker %s: an operator asked it to stop: draining", self.id)
            self.stopped_by_operator = True
            self.stop(wait=False)
        elif command == "quiet" and not self._quiet.is_set():
            log.info("worker %s: an operator asked it to go quiet: no new jobs", self.id)
            self._quiet.set()
            self._slots.wake()

    def describe(self) -> dict[str, Any]:
        """This worker's registry record (with the weight of each queue it serves)."""
        return {**describe(self), "weights": dict(self.selector.queues)}

    def _wiring(self) -> Wiring:
        """What the helper threads need of this worker, handed over explicitly."""
        rt, pool = self.runtime, any(t.executor == "process" for t in self.runtime.tasks.values())
        return Wiring(
            self.broker,
            rt.now,
            self.id,
            self.running_jobs,
            done=self._done,
            recorded=self._recorded,
            on_deadline=self._on_deadline,
            on_stuck=self._on_stuck,
            describe=self.describe if self.heartbeat else None,
            timeout_grace=rt.settings.timeout_grace,
            visibility_timeout=self.visibility_timeout,
            heartbeat_interval=rt.settings.heartbeat_interval,
            warm_pool=(lambda: self._executor("process").submit([])) if pool else None,
            on_command=self._on_command,
            on_cancel=self._on_cancel,
            board=self.board,
        )

    # ------------------------------------------------------------------ outcomes
    def _report(self, run: Running, result: Any, exc: BaseException | None, tb: str | None) -> None:
        """Executors call this once per job; the first decision for an attempt wins."""
        if isinstance(exc, UnguardedMain):  # not the job's fault: released by the hard stop
            self._pool_unusable(exc)
            return
        if not run.settle():
            return
        if result is None and exc is None and not run.interrupted:
            outcome = OK  # the common case: no result to check, nothing to classify
        else:
            outcome = reported(run, result, exc, tb, self.runtime.now(), self.runtime.rng)
        self._done.put((run, outcome))
        self._slots.freed()

    def _recorded(self, runs: list[Running]) -> None:
        """The recorder thread wrote these outcomes: free their slots (or stop at the limit)."""
        done = self.processed + self.failed
        if self.max_jobs and done >= self.max_jobs and not self._stopping.is_set():
            log.info("worker %s: %d jobs done (limit %d): recycling", self.id, done, self.max_jobs)
            self.exit_code = EXIT_RECYCLE
            self._stopping.set()
        self.board.remove(runs)  # their last progress is written, their contexts dropped
        self._slots.recorded(runs)

    def _pool_unusable(self, exc: UnguardedMain) -> None:
        """Log the missing-guard error once and stop; in-flight jobs are released uncharged."""
        with self._guard_lock:
            if self._guard_reported:
                return
            self._guard_reported = True
        log.error("worker %s: the process pool cannot start: %s", self.id, explain())
        self.stop_now(EXIT_CONFIG)

    # ------------------------------------------------------------------ timeouts, cancels
    def _on_cancel(self, run: Running) -> None:
        """An operator cancelled this running job (worker/cancel.py): stop it."""
        if stop_job(run, self._executors.get(run.executor)):  # it never started
            self._done.put((run, CANCELLED))
            self._slots.freed()
        elif self._watchdog is not None:  # it must stop within timeout_grace (timeouts.py)
            self._watchdog.poke()

    def _on_deadline(self, run: Running) -> None:
        self._executors[run.executor].interrupt(run)

    def _on_stuck(self, run: Running) -> None:
        if not self._executors[run.executor].abandon(run):
            return
        what = ("cancellation", "cancelled") if run.cancel_requested else ("timeout", "timed out")
        log.error(
            "job %s (%s) ignored its %s for %gs: recording it as %s and "
            "recycling this worker process",
            run.job.id,
            run.job.task,
            what[0],
            self.runtime.settings.timeout_grace,
            what[1],
        )
        if run.settle():
            rt = self.runtime
            self._done.put((run, reported(run, None, None, None, rt.now(), rt.rng)))
            self._slots.freed()
        self.stop_now(EXIT_STUCK)

    # ------------------------------------------------------------------ start / stop
    def _drain(self) -> None:
        slots = self._slots
        if slots.inflight and not self._hard.is_set():
            log.info(
                "worker %s: waiting up to %gs for %d in-flight job(s)",
                self.id,
                self.shutdown_timeout,
                len(slots.inflight),
            )
        slots.wait_empty(time.monotonic() + self.shutdown_timeout, self._hard)
        for run in self.running_jobs():
            if run.settle():
                self.recorder.release(run, f"worker shutdown ({self.id})")
                slots.drop(run)
