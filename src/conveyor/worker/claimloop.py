"""The worker's claim side: the claim loop, its claim and wait policy, the dispatch to executors.

A mixin of ``Worker`` (``worker/loop.py``), kept apart so the loop's lifecycle (start, stop,
outcomes, timeouts) and its claiming each stay one screen per duty. The policy: never claim
more than the free slots (and the ``max_jobs`` budget) allow; after an empty claim, or a short
one the broker reports ``drained`` (it read every queue to the end), wait for work until the
claim's ``next_due`` or ``poll_interval``, whichever is sooner (woken early by new work;
``IdleBackoff`` stops a backend that cannot block from spinning); a failing claim
backs off exponentially up to 10 s, and a ``BrokerConfigError`` stops the worker; what a claim
already on its way when an operator's ``quiet`` arrived leased is given back uncharged.
Methods moved here, not wrapped: the per-job cost is the same as when they lived in ``loop.py``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from ..errors import BrokerConfigError
from ..middleware import Around, Middleware, emit
from ..outage import OutageLog
from .execute import Outcome, hooked, runs_of
from .executors import Executor, make_executor
from .jobctx import JobBoard
from .procutil import EXIT_CONFIG
from .running import Running
from .slots import IdleBackoff, Slots

if TYPE_CHECKING:
    from ..broker.base import Broker, Lease
    from ..core.queues import QueueSelector
    from ..runtime import Runtime
    from .timeouts import Watchdog

log = logging.getLogger("conveyor.worker")


class ClaimLoop:
    """``_claim_loop`` (the production loop's thread), ``_claim``, ``_dispatch``, ``_executor``."""

    runtime: Runtime
    app: Any  # the facade, for middleware that reads ``worker.app``
    broker: Broker
    selector: QueueSelector
    id: str
    concurrency: int
    process_pool_size: int
    visibility_timeout: float
    max_lost: int
    max_jobs: int | None
    board: JobBoard
    _slots: Slots
    _stopping: threading.Event
    _quiet: threading.Event
    _done: queue.SimpleQueue[tuple[Running, Outcome] | None]
    _executors: dict[str, Executor]
    _watchdog: Watchdog | None
    _claim_errors: int
    _outage: OutageLog
    _reap_failures: int

    if TYPE_CHECKING:  # defined by ``Worker`` and ``InlineMode``; declared for the type checker

        @property
        def processed(self) -> int: ...

        @property
        def failed(self) -> int: ...

        def maintain(self, now: float, force: bool = False) -> None: ...

        def stop_now(self, code: int | None = None) -> None: ...

        def _report(
            self, run: Running, result: Any, exc: BaseException | None, tb: str | None
        ) -> None: ...

    def _claim_loop(self) -> None:
        backoff = IdleBackoff(self.runtime.settings.poll_interval)
        slots, stopping = self._slots, self._stopping
        while not stopping.is_set():
            self._maintain_safely()
            free = slots.wait_claimable(stopping)
            if self._quiet.is_set():  # quiet: claim nothing; running jobs finish
                stopping.wait(0.1)
                continue
            if self.max_jobs:  # never start more than the job limit allows
                free = min(free, self.max_jobs - self.processed - self.failed - len(slots.inflight))
                if free <= 0:
                    stopping.wait(0.05)
                    continue
            if stopping.is_set():
                break
            leases = self._claim(free)
            if leases:
                backoff.claimed()
                self._dispatch(leases)
                time.sleep(0)  # yield the GIL to the job threads just woken (~0.1 ms pickup)
                if len(leases) >= free or not getattr(leases, "drained", False):
                    continue
                # short and drained (issue 18): the queues had no more; claiming again now
                # would come back empty (one call per shard on a sharded queue): wait instead
            began = time.monotonic()
            wait, due = backoff.poll_interval, False
            next_due = getattr(leases, "next_due", None)  # set by an empty claim (Claimed)
            if next_due is not None and (until := next_due - self.runtime.now()) < wait:
                # sleep exactly until the next delayed job / lease deadline (BullMQ-style)
                wait, due = max(0.0, until), True
            if not self._wait_safely(wait, due):
                continue  # an outage: the claim's own retry and back-off take over
            delay = backoff.delay_after_wait(time.monotonic() - began)
            if delay:  # fast, empty wake-ups repeat: a backend that cannot block, do not spin
                stopping.wait(delay)

    def _wait_safely(self, wait: float, due: bool) -> bool:
        """``wait_for_work``; False (after a short pause) when the broker failed: an outage
        while waiting must never end the worker (logged once, as for the claim)."""
        try:
            self.broker.wait_for_work(self.selector.names, wait, due=due)
        except Exception as exc:
            if not self._outage.failed(exc, "waiting for work", log):
                log.warning("waiting for work failed", exc_info=True)
            self._stopping.wait(min(wait, 1.0))
            return False
        return True

    def _maintain_safely(self) -> None:
        """``maintain``, never raising: an outage is logged once (``OutageLog``), any other
        error with its traceback once per run of failures (``maintain`` retries it sooner)."""
        failing = self._reap_failures
        try:
            self.maintain(self.runtime.now())
        except Exception as exc:
            if not self._outage.failed(exc, "reaping expired leases", log) and not failing:
                log.warning("reaping expired leases failed; retrying, backing off", exc_info=True)
            return
        if failing and not self._reap_failures:
            log.info("reaping expired leases works again after %d failure(s)", failing)

    def _claim(self, free: int) -> list[Lease]:
        try:
            leases = self.broker.claim(
                self.selector.order(),
                self.runtime.now(),
                limit=free,
                worker_id=self.id,
                max_lost=self.max_lost,
                visibility_timeout=self.visibility_timeout,
            )
        except BrokerConfigError as exc:  # permanent (e.g. the password changed): exit, do not spin
            log.error("worker %s: %s: stopping", self.id, exc)
            self.stop_now(EXIT_CONFIG)
            return []
        except Exception as exc:
            self._claim_errors += 1
            delay = min(10.0, 0.5 * 2 ** (self._claim_errors - 1))
            if not self._outage.failed(exc, "claim", log):  # an outage is logged once
                log.warning(
                    "claim failed (%d in a row); retrying in %.1fs",
                    self._claim_errors,
                    delay,
                    exc_info=self._claim_errors == 1,
                )
            self._stopping.wait(delay)
            return []
        self._outage.succeeded(log)
        if self._claim_errors:
            log.info("claiming works again after %d failure(s)", self._claim_errors)
            self._claim_errors = 0
        if leases and self._quiet.is_set():  # quiet arrived while this claim was on its way
            return self._give_back(leases)
        return leases

    def _give_back(self, leases: list[Lease]) -> list[Lease]:
        """Release, uncharged, what a claim leased after an operator's ``quiet`` arrived (the
        worker may already have reported "quiet": it runs nothing new; Sidekiq requeues work
        fetched after quiet the same way). Returns the leases whose release failed: they run,
        rather than wait for their lease to expire."""
        now, kept = self.runtime.now(), []
        for lease in leases:
            try:
                self.broker.release(
                    lease.id, lease.token, now, penalize=False, note=f"worker quiet ({self.id})"
                )
            except Exception:
                log.warning("could not give back job %s after quiet: running it", lease.id)
                kept.append(lease)
        return kept

    def _dispatch(self, leases: list[Lease]) -> None:
        runs, refused = runs_of(leases, self.runtime.tasks)
        self._slots.claimed(runs, len(runs) - len(refused))
        for run, outcome in refused:
            run.settle()
            self._done.put((run, outcome))
        if refused:
            runs = [r for r in runs if r.executor != "none"]
        self.board.add(runs)
        before = hooked(self.runtime.middleware, "before_process")
        around = Around.of(self, self.runtime.middleware)
        if before or around is not None:
            self._before(runs, before, around)
        groups: dict[str, list[Running]] = {}
        for run in runs:
            group = groups.get(run.executor)
            if group is None:
                groups[run.executor] = [run]
            else:
                group.append(run)
        for kind, group in groups.items():
            try:
                self._executor(kind).submit(group)
            except Exception as exc:  # e.g. the process pool cannot start
                log.exception("cannot start %d job(s) on the %s executor", len(group), kind)
                for run in group:
                    self._report(run, None, exc, None)
        if self._watchdog is not None and any(r.timeout for r in runs):
            self._watchdog.poke()

    def _before(self, runs: list[Running], before: list[Middleware], around: Around | None) -> None:
        """``before_process`` hooks (here), and the ``around_process`` hooks for the executors."""
        for run in runs:
            if before:
                emit(before, "before_process", self, run.job)
            run.around = around

    def _executor(self, kind: str) -> Executor:
        ex = self._executors.get(kind)
        if ex is None:
            size = self.process_pool_size if kind == "process" else self.concurrency
            ex = self._executors[kind] = make_executor(kind, size, self._report)
        return ex
