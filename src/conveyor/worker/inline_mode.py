"""The worker's inline mode: ``process_next`` / ``run_until_idle`` run one job at a time on the
caller's thread, with time passed in (deterministic tests and simulations).

A mixin of ``Worker`` (``worker/loop.py``), kept apart so the production loop stays one screen
per duty. Jobs with a timeout are enforced as on the thread executor (``worker/inline.py``);
``current_job()`` works (its progress is written when the job ends); cancelling a running job
needs ``Worker.run()``'s job watcher, so it does not apply here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..core.queues import QueueSelector
from ..middleware import Around, emit
from ..outage import retry_delay
from .execute import Outcome, call_inline, outcome_of_call, precheck
from .jobctx import JobBoard
from .procutil import EXIT_STUCK
from .recorder import Recorder
from .running import Running, effective_timeout

if TYPE_CHECKING:
    from ..broker.base import Broker, Lease
    from ..runtime import Runtime


class InlineMode:
    """``process_next``, ``run_until_idle``, ``maintain``, ``execute`` and ``record``."""

    runtime: Runtime
    app: Any  # the facade, for middleware that reads ``worker.app``
    broker: Broker
    selector: QueueSelector
    id: str
    visibility_timeout: float
    max_lost: int
    board: JobBoard
    recorder: Recorder
    exit_code: int
    _last_reap: float  # the last reap pass that succeeded
    _reap_failures: int  # reap passes that raised in a row
    _reap_retry_at: float  # after a failed pass: not retried before this

    def process_next(self, now: float | None = None) -> bool:
        """Claim and run one ready job inline; False when nothing is runnable at ``now``."""
        at = self.runtime.now() if now is None else now
        self.maintain(at, force=True)
        leases = self.broker.claim(
            self.selector.order(),
            at,
            limit=1,
            worker_id=self.id,
            visibility_timeout=self.visibility_timeout,
            max_lost=self.max_lost,
        )
        if not leases:
            return False
        lease = leases[0]
        started = time.monotonic()
        outcome = self.execute(lease, at)
        self.record(lease, outcome, at if now is not None else self.runtime.now(), started)
        return True

    def run_until_idle(self, now: float | None = None, max_jobs: int = 1_000_000) -> int:
        """Run jobs inline until none is runnable at ``now``; return how many ran."""
        ran = 0
        while ran < max_jobs and self.process_next(now):
            ran += 1
        return ran

    def maintain(self, now: float, force: bool = False) -> None:
        """Reap expired leases (at most once per ``reap_interval`` unless forced). A pass that
        raised counts for nothing: it is tried again after ``retry_delay`` (0.5 s, doubled per
        failure in a row, at most ``reap_interval``), not a whole interval later."""
        interval = self.runtime.settings.reap_interval
        if not force and (now - self._last_reap < interval or now < self._reap_retry_at):
            return
        try:
            self.broker.reap_expired(now, max_lost=self.max_lost)
        except Exception:
            self._reap_failures += 1
            delay = retry_delay(self._reap_failures, interval, self.runtime.rng)
            self._reap_retry_at = now + delay
            raise
        self._last_reap = now
        self._reap_failures = 0

    def execute(self, lease: Lease, now: float) -> Outcome:
        """Run a leased job (here, or on a helper thread if it has a timeout); classify it."""
        job = lease.job
        task = self.runtime.tasks.get(job.task)
        rejected = precheck(task, job)
        if rejected is not None or task is None:
            assert rejected is not None
            return rejected
        emit(self.runtime.middleware, "before_process", self, job)
        run = Running(lease, task, "inline", None)
        self.board.add([run])  # current_job() works inline too (no cancelling: no watcher)
        try:
            return self._execute(lease, task, now)
        finally:
            self.board.remove([run])

    def _execute(self, lease: Lease, task: Any, now: float) -> Outcome:
        job = lease.job
        timeout = effective_timeout(task, job)
        around = Around.of(self, self.runtime.middleware)
        if timeout:  # enforced as on the thread executor (see worker/inline.py)
            from .inline import run_with_timeout

            grace = self.runtime.settings.timeout_grace
            outcome, stuck = run_with_timeout(
                lease, task, timeout, now, grace, self.runtime.rng, around
            )
            if stuck:
                self.exit_code = EXIT_STUCK
            return outcome
        return outcome_of_call(
            task, job, lambda: call_inline(task, job, around), now, self.runtime.rng
        )

    def record(
        self, lease: Lease, outcome: Outcome, now: float, started: float | None = None
    ) -> str:
        """Write one outcome to the broker; returns the outcome name for logs and hooks."""
        run = Running(lease, self.runtime.tasks.get(lease.job.task), "inline", None)
        run.started = started
        return self.recorder.record([(run, outcome)], now)[0]
