"""Worker: claim jobs from the broker, run them, record outcomes.

Two ways to drive it:

* ``process_next(now)`` / ``run_until_idle(now)``: one job at a time, inline, on the caller's
  thread, with time passed in — deterministic tests and simulations.
* ``run()``: a thread pool of ``concurrency`` slots; claims never exceed the free slots, and
  successes are acknowledged in batches. ``stop(timeout)`` drains: no new claims, running jobs
  finish until the timeout, then unfinished leases are released without an attempt penalty.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..broker.base import Ack, Lease
from ..core.ids import new_ulid
from ..core.queues import QueueSelector, parse_queues
from ..errors import LeaseLost
from ..middleware import emit
from .execute import Outcome, call_inline, outcome_of_call, precheck

if TYPE_CHECKING:
    from ..app import Conveyor

log = logging.getLogger("conveyor.worker")


class Worker:
    """Runs jobs of some queues; see the module docstring for the two driving modes."""

    def __init__(
        self,
        app: Conveyor,
        queues: Sequence[str] | str | None = None,
        *,
        concurrency: int = 1,
        processes: int = 1,
        strict: bool = False,
        visibility_timeout: float | None = None,
        worker_id: str | None = None,
        max_lost: int | None = None,
    ) -> None:
        self.app = app
        self.broker = app.broker
        self.selector = QueueSelector(parse_queues(queues), strict)
        self.concurrency = max(1, int(concurrency))
        self.processes = processes
        self.visibility_timeout = visibility_timeout or app.settings.visibility_timeout
        self.max_lost = max_lost or app.settings.max_lost
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{new_ulid(app.now(), app.id_rng)[-6:]}"
        self.processed = 0
        self.failed = 0
        self._stopping = threading.Event()
        self._last_reap = -1e18

    @property
    def queues(self) -> list[str]:
        """The queue names this worker serves."""
        return list(self.selector.names)

    # ------------------------------------------------------------------ inline mode
    def process_next(self, now: float | None = None) -> bool:
        """Claim and run one ready job inline; False when nothing is runnable at ``now``."""
        at = self.app.now() if now is None else now
        self.maintain(at, force=True)
        leases = self.broker.claim(self.selector.order(), at, limit=1,
                                   visibility_timeout=self.visibility_timeout, worker_id=self.id)  # fmt: skip
        if not leases:
            return False
        lease = leases[0]
        outcome = self.execute(lease, at)
        self.record(lease, outcome, at if now is not None else self.app.now())
        return True

    def run_until_idle(self, now: float | None = None, max_jobs: int = 1_000_000) -> int:
        """Run jobs inline until none is runnable at ``now``; return how many ran."""
        ran = 0
        while ran < max_jobs and self.process_next(now):
            ran += 1
        return ran

    # ------------------------------------------------------------------ shared steps
    def maintain(self, now: float, force: bool = False) -> None:
        """Reap expired leases (at most once per ``reap_interval`` unless forced)."""
        if force or now - self._last_reap >= self.app.settings.reap_interval:
            self._last_reap = now
            self.broker.reap_expired(now, max_lost=self.max_lost)

    def execute(self, lease: Lease, now: float) -> Outcome:
        """Run a leased job on this thread and classify the result (never raises)."""
        job = lease.job
        task = self.app.tasks.get(job.task)
        rejected = precheck(task, job)
        if rejected is not None or task is None:
            assert rejected is not None
            return rejected
        emit(self.app.middleware, "before_process", self, job)
        return outcome_of_call(task, job, lambda: call_inline(task, job), now, self.app.rng)

    def record(self, lease: Lease, outcome: Outcome, now: float, started: float | None = None) -> str:
        """Write one outcome to the broker; returns the outcome name for logs and hooks."""
        job = lease.job
        duration = 0.0 if started is None else time.monotonic() - started
        if outcome.ok:
            ok = self.broker.complete([Ack(job.id, lease.token, outcome.result, job.queue)], now)[0]
            name = "completed" if ok else "lease_lost"
        else:
            name = self._record_failure(lease, outcome, now)
        self._after(job, name, duration, outcome)
        return name

    def _record_failure(self, lease: Lease, outcome: Outcome, now: float) -> str:
        job, decision = lease.job, outcome.decision
        assert decision is not None
        try:
            state = self.broker.fail(job.id, lease.token, now,
                                     error=outcome.error_entry(job, now, self.id),
                                     retry_at=decision.retry_at)  # fmt: skip
        except LeaseLost:
            return "lease_lost"
        if decision.retry_at is not None:
            emit(self.app.middleware, "on_retry", self, job, decision.retry_at)
        else:
            emit(self.app.middleware, "on_dead_letter", self, job, str(decision.kind))
        return str(state)

    def _after(self, job: Any, name: str, duration: float, outcome: Outcome) -> None:
        if name == "completed":
            self.processed += 1
        else:
            self.failed += 1
        if name == "lease_lost":
            log.warning("job %s: lease lost, outcome discarded", job.id)
            emit(self.app.middleware, "on_lease_lost", self, job)
        log.info("job %s task=%s queue=%s attempt=%d worker=%s duration=%.4fs outcome=%s",
                 job.id, job.task, job.queue, job.attempts, self.id, duration, name)  # fmt: skip
        emit(self.app.middleware, "after_process", self, job, outcome=name, duration=duration,
             error=None, reverse=True)  # fmt: skip

    # ------------------------------------------------------------------ threaded mode
    def run(self) -> None:
        """Run until ``stop()``: ``concurrency`` threads, claims sized to free slots."""
        self._stopping.clear()
        emit(self.app.middleware, "on_worker_start", self)
        inflight: dict[Future[Outcome], tuple[Lease, float]] = {}
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="conveyor-job") as pool:
            while not self._stopping.is_set():
                self._reap_done(inflight)
                now = self.app.now()
                self.maintain(now)
                free = self.concurrency - len(inflight)
                leases = self._claim(free, now) if free > 0 else []
                for lease in leases:
                    fut = pool.submit(self.execute, lease, now)
                    inflight[fut] = (lease, time.monotonic())
                if not leases:
                    self._idle(inflight)
            self._drain(inflight)
        emit(self.app.middleware, "on_worker_stop", self)

    def _claim(self, free: int, now: float) -> list[Lease]:
        try:
            return self.broker.claim(self.selector.order(), now, limit=free,
                                     visibility_timeout=self.visibility_timeout, worker_id=self.id)  # fmt: skip
        except Exception:
            log.exception("claim failed; backing off")
            self._stopping.wait(1.0)
            return []

    def _idle(self, inflight: dict[Future[Outcome], tuple[Lease, float]]) -> None:
        if inflight and len(inflight) >= self.concurrency:
            from concurrent.futures import FIRST_COMPLETED, wait

            wait(list(inflight), timeout=0.5, return_when=FIRST_COMPLETED)
        elif inflight:
            time.sleep(0.001)
        else:
            self.broker.wait_for_work(self.selector.names, self.app.settings.poll_interval)

    def _reap_done(self, inflight: dict[Future[Outcome], tuple[Lease, float]]) -> None:
        for fut in [f for f in inflight if f.done()]:
            lease, started = inflight.pop(fut)
            self.record(lease, fut.result(), self.app.now(), started)

    def _drain(self, inflight: dict[Future[Outcome], tuple[Lease, float]]) -> None:
        deadline = time.monotonic() + self._drain_timeout
        while inflight and time.monotonic() < deadline:
            self._reap_done(inflight)
            time.sleep(0.01)
        self._reap_done(inflight)
        for lease, _ in inflight.values():
            try:
                self.broker.release(lease.job.id, lease.token, self.app.now(), penalize=False,
                                    note="worker shutdown")  # fmt: skip
            except LeaseLost:
                pass

    _drain_timeout: float = 30.0

    def stop(self, timeout: float | None = None) -> None:
        """Ask ``run()`` to drain and return; in-flight jobs get ``timeout`` seconds."""
        self._drain_timeout = self.app.settings.shutdown_timeout if timeout is None else timeout
        self._stopping.set()
