"""Write attempt outcomes to the broker: successes in ``complete`` batches, failures one by one.

Then, per job: update the worker's counters, log ONE line (job id, task, queue, attempt, worker
id, duration, outcome: DEBUG for successes, INFO for shutdown releases, WARNING for failures),
and emit the middleware hooks (``on_retry`` / ``on_dead_letter`` / ``on_lease_lost``, then
``after_process``; ``on_release`` for a job given back at shutdown). Completed jobs are handled
per batch: one counter update, and one ``after_process_batch(worker, jobs, durations)`` call
per middleware (a hook declared on ``Middleware``, whose default calls ``after_process`` per
job; ``MetricsMiddleware`` counts the whole batch under one lock).

Broker errors are retried while the job's lease is still valid (the lease keeper keeps
extending jobs until they are recorded, and moves ``Running.lease_until``): a write held up by
a lock or a failover is retried until it lands or the lease runs out, never for a fixed count.
Deterministic errors (a value the broker cannot encode) are never retried. An attempt whose
lease was lost is never written — it belongs to another delivery now.

The per-job aftermath (counters, the log line, the hooks, shutdown releases, lost leases) is
the ``Aftermath`` mixin of ``worker/aftermath.py``.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..broker.base import Ack
from ..core.job import ErrorKind
from ..core.serialization import result_problem
from ..errors import LeaseLost
from ..middleware import after_process_batch, emit, hooked
from ..outage import OutageLog, is_connection_error
from . import ratecap
from .aftermath import Aftermath
from .cancel import record_cancelled
from .execute import Outcome, Unreceived, safe_text
from .leanlog import text_safe
from .running import Running

if TYPE_CHECKING:
    from ..broker.base import Broker
    from ..middleware import Middleware

RATE_LIMITED = ErrorKind.RATE_LIMITED
log = logging.getLogger("conveyor.worker")
T = TypeVar("T")
RETRY_FOR = 60.0  # retry budget of a failing write whose lease deadline is unknown
BARE_NOTE = "result: could not be stored"
MAX_DELAY = 0.5  # longest pause between retries: record soon after the broker is back
BATCH = 500  # outcomes written per round (successes in one ``complete`` call)
JOIN_TIMEOUT = RETRY_FOR + 10.0  # how long a stopping worker waits for the recorder thread
#: errors that come from the data, not the broker's health: retrying cannot help
#: (orjson.JSONEncodeError is a TypeError; ValidationError and DecodeError are ValueErrors)
DETERMINISTIC: tuple[type[Exception], ...] = (TypeError, ValueError, RecursionError)


def lease_left(runs: Sequence[Running]) -> float:
    """Seconds until the last of ``runs``' leases runs out."""
    now = time.monotonic()
    return max((_lease_until(run) - now for run in runs), default=0.0)


def _lease_until(run: Running) -> float:
    """The keeper's last extension, else the claim's lease (``RETRY_FOR`` if unknown)."""
    if run.lease_until is not None:
        return run.lease_until
    started_at = run.job.started_at  # the broker's claim time; the lease ran from then
    if started_at is None:
        return run.claimed + RETRY_FOR
    return run.claimed + max(0.0, run.lease.expires_at - started_at)


class Recorder(Aftermath):
    """Records outcomes for one worker (thread-safe)."""

    def __init__(
        self,
        worker: Any,
        worker_id: str,
        broker: Broker,
        middleware: list[Middleware],
        now: Callable[[], float],
        max_result_bytes: int,
        hard_stopping: Callable[[], bool],
    ) -> None:
        self.worker = worker  # what the middleware hooks receive as ``worker``
        self.worker_id = worker_id
        self.broker = broker
        self.middleware = middleware
        self.now = now
        self.max_result_bytes = max_result_bytes
        self.hard_stopping = hard_stopping  # a hard stop abandons retried writes
        self._lock = threading.Lock()
        self.processed = 0
        self.failed = 0
        #: ``RateLimited`` give-backs in a row before one is a failure (None: no cap)
        self.max_rate_limited: int | None = ratecap.DEFAULT_MAX_RATE_LIMITED
        self.rng = getattr(getattr(worker, "runtime", None), "rng", None) or random.Random()

    def record(self, items: Sequence[tuple[Running, Outcome]], now: float) -> list[str]:
        """Write a batch of outcomes; returns each one's name (``completed``, ``lease_lost``...)."""
        names = [""] * len(items)
        acks: list[int] = []
        for i, (run, outcome) in enumerate(items):
            if run.lost:
                names[i] = "lease_lost"
            elif outcome.cancelled:  # stopped on an operator's request (worker/cancel.py)
                names[i] = record_cancelled(self, run, now)
            elif outcome.ok:
                acks.append(i)
            elif outcome.decision is not None and outcome.decision.kind is RATE_LIMITED:
                names[i] = self._rate_limited(run, outcome, now)
            else:
                names[i] = self._fail(run, outcome, now)
        if acks:
            batch = [self._ack(*items[i], now) for i in acks]
            results = self._complete(batch, [items[i][0] for i in acks], now)
            for i, ok in zip(acks, results or [False] * len(acks), strict=True):
                names[i] = "completed" if ok else "lease_lost"
        completed = [items[i][0] for i in acks if names[i] == "completed"]
        if completed:
            self.completed(completed)
        for i, (run, outcome) in enumerate(items):
            if names[i] != "completed":
                self.after(run, names[i], outcome)
        return names

    def _ack(self, run: Running, outcome: Outcome, now: float) -> Ack:
        """The ``Ack`` of a success; a result that cannot be stored is dropped with a note.

        The result is fully encoded here, per job, so a bad one can never make the batch's
        ``complete`` fail: it is completed WITHOUT the result and a ``result_error`` entry says
        why (the handler's work happened: dead-lettering or re-running it would repeat it).
        """
        job, result = run.job, outcome.result
        if result is None:
            return Ack.fast(job.id, run.token, None, job.queue)
        if isinstance(result, Unreceived):  # a process-pool child's, the worker cannot unpickle
            return self._dropped(run, result.problem, now)
        problem = result_problem(result, self.max_result_bytes)
        if problem is None:
            return Ack.fast(job.id, run.token, result, job.queue)
        return self._dropped(run, problem, now)

    def _dropped(self, run: Running, problem: str, now: float) -> Ack:
        """An ``Ack`` without the result, noting ``problem`` in the job's ``errors``."""
        job = run.job
        log.warning(  # escaped here: the problem may quote the value's own exception
            "job %s (%s): result not stored, the job completes without it: %s",
            text_safe(job.id),
            text_safe(job.task),
            text_safe(problem[:500]),
        )
        error = {
            "attempt": job.attempts,
            "kind": str(ErrorKind.RESULT_ERROR),
            "type": "ValidationError",
            "message": safe_text(problem[:2000]),
            "traceback": "",
            "worker": self.worker_id,
            "at": now,
        }
        return Ack(job.id, run.token, None, job.queue, error)

    def _complete(self, batch: list[Ack], runs: list[Running], now: float) -> list[bool] | None:
        """``complete`` with retries; a deterministic error (a value the broker cannot encode)
        is never retried: the batch is split so it touches only the job that caused it, and
        that job is completed without its result."""
        try:
            return self._retrying("complete", lambda: self.broker.complete(batch, now), runs)
        except DETERMINISTIC as exc:
            if len(batch) > 1:
                out: list[bool] = []
                for ack, run in zip(batch, runs, strict=True):
                    out.extend(self._complete([ack], [run], now) or [False])
                return out
            ack = batch[0]
            if ack.result is None and (ack.error is None or ack.error["message"] == BARE_NOTE):
                log.exception("broker complete failed for job %s; giving up", ack.job_id)
                return None
            log.warning("broker complete refused job %s's result: %s", ack.job_id, exc)
            # without the result, with a note; if even the note failed, the bare minimum
            message = BARE_NOTE if ack.error is not None else safe_text(f"result: {exc}"[:2000])
            run_error = {
                "kind": str(ErrorKind.RESULT_ERROR),
                "type": type(exc).__name__,
                "message": message,
                "traceback": "",
                "worker": self.worker_id,
                "at": now,
            }
            retry = Ack(ack.job_id, ack.token, None, ack.queue, run_error)
            return self._complete([retry], runs, now)

    def completed(self, runs: Sequence[Running]) -> None:
        """``after`` for a batch of completed jobs: one counter update, batched metrics."""
        with self._lock:
            self.processed += len(runs)
        clock = time.monotonic()  # one reading for the batch (``Running.duration`` per job)
        durations = [clock - (r.started if r.started is not None else r.claimed) for r in runs]
        if log.isEnabledFor(logging.DEBUG):
            wid = self.worker_id
            for run, duration in zip(runs, durations, strict=True):
                job = run.job
                fields = {
                    "job_id": job.id,
                    "task": job.task,
                    "queue": job.queue,
                    "attempt": job.attempts,
                    "worker": wid,
                    "duration": round(duration, 6),
                    "outcome": "completed",
                }
                log.debug(
                    "job %s task=%s queue=%s attempt=%d worker=%s duration=%.3fs outcome=completed",
                    job.id,
                    job.task,
                    job.queue,
                    job.attempts,
                    wid,
                    duration,
                    extra={"job": fields},
                )
        after = hooked(self.middleware, "after_process", "after_process_batch")
        if after:  # one call per middleware and batch (the default calls after_process per job)
            after_process_batch(after, self.worker, [run.job for run in runs], durations)

    def start(
        self,
        done: queue.SimpleQueue[tuple[Running, Outcome] | None],
        recorded: Callable[[list[Running]], None],
    ) -> threading.Thread:
        """Start the recorder thread (``drain``); put None in ``done`` to stop it."""
        thread = threading.Thread(
            target=self.drain, args=(done, recorded), daemon=True, name="conveyor-recorder"
        )
        thread.start()
        return thread

    def drain(
        self,
        done: queue.SimpleQueue[tuple[Running, Outcome] | None],
        recorded: Callable[[list[Running]], None],
    ) -> None:
        """Recorder thread: write what ``done`` delivers, in batches, until it yields None."""
        while True:
            item = done.get()
            stop = item is None
            batch = [] if item is None else [item]
            while not stop and len(batch) < BATCH:
                try:
                    more = done.get_nowait()
                except queue.Empty:
                    break
                stop = more is None
                if more is not None:
                    batch.append(more)
            if batch:
                try:
                    self.record(batch, self.now())
                except Exception:
                    log.exception("recording %d outcome(s) failed", len(batch))
                recorded([run for run, _ in batch])
            if stop:
                return

    def _rate_limited(self, run: Running, outcome: Outcome, now: float) -> str:
        """``RateLimited``: give the job back for later, attempt returned, no failure counted;
        the ``max_rate_limited``-th in a row is an ordinary failure instead (``ratecap``)."""
        decision = outcome.decision
        assert decision is not None
        failure = ratecap.capped(run, outcome, now, self.max_rate_limited, self.rng)
        if failure is not None:
            return self._fail(run, failure, now)
        delay = max(0.0, (decision.retry_at or now) - now)
        # the handler's reason is job data: a lone surrogate must not fail the release
        note = safe_text(f"rate limited: {decision.message[:200]}; retry in {delay:g}s")
        try:
            self._retrying(
                "release",
                lambda: self.broker.release(
                    run.job.id, run.token, now, delay=delay, penalize=False, note=note
                ),
                [run],
            )
        except LeaseLost:
            return "lease_lost"
        except DETERMINISTIC:  # this job's problem only: the rest of the batch is written
            log.exception("broker release refused job %s's note", text_safe(run.job.id))
            return "lease_lost"
        return "released"

    def _fail(self, run: Running, outcome: Outcome, now: float) -> str:
        job, decision = run.job, outcome.decision
        assert decision is not None
        error = outcome.error_entry(job, now, self.worker_id)
        try:
            state = self._retrying(
                "fail",
                lambda: self.broker.fail(
                    job.id, run.token, now, error=error, retry_at=decision.retry_at
                ),
                [run],
            )
        except LeaseLost:
            return "lease_lost"
        except DETERMINISTIC:
            log.exception("broker fail refused job %s's error entry", job.id)
            return "lease_lost"
        if state is None:
            return "lease_lost"
        if decision.retry_at is not None:
            emit(self.middleware, "on_retry", self.worker, job, decision.retry_at)
        else:
            emit(self.middleware, "on_dead_letter", self.worker, job, str(decision.kind))
        return str(state)

    def _retrying(self, what: str, call: Callable[[], T], runs: Sequence[Running]) -> T | None:
        """Run a broker write of ``runs``' outcomes, retrying transient errors while any of
        their leases is still valid (a lock held elsewhere, a Redis failover); LeaseLost and
        deterministic errors propagate at once.

        The deadline is re-read on every round: the lease keeper moves it on each successful
        extension. Once it passes, another worker may own the job, so the write is abandoned.
        """
        delay = 0.05
        outage = OutageLog.shared(self.broker)
        while True:
            try:
                result = call()
            except LeaseLost:
                raise
            except DETERMINISTIC:
                raise
            except Exception as exc:
                left = lease_left(runs)
                if left <= 0 or self.hard_stopping():
                    log.error(
                        "broker %s failed; giving up (the lease will expire and the "
                        "job will be redelivered)",
                        what,
                        exc_info=not is_connection_error(exc),
                    )
                    return None
                pause = min(delay, left)
                # a lost connection is logged once per outage (with the loops' lines), not
                # with a traceback per retry; any other error keeps its traceback
                if not outage.failed(exc, f"{what} of finished jobs", log):
                    log.warning(
                        "broker %s failed; retrying in %.2fs (lease valid for %.1fs)",
                        what,
                        pause,
                        left,
                        exc_info=True,
                    )
                time.sleep(pause)
                delay = min(MAX_DELAY, delay * 2)
            else:
                outage.succeeded(log)
                return result
