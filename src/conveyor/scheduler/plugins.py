"""Scheduler plugins: each duty of the scheduler behind one small interface.

A plugin does one duty at ``tick(now)`` and returns when it wants to run next (None: on the
next pass, at most the scheduler's ``interval`` away). The scheduler's loop ticks every plugin
that is due and sleeps until the earliest one is due again, so a new duty (workflow release,
limiter upkeep) is one more plugin and the loop does not change. ``start(now)`` runs once before
the first tick and ``stop()`` when ``Scheduler.run()`` returns; both do nothing by default.

The built-in duties, in the order they run on a pass:

* ``promote`` — move due scheduled and retry-scheduled jobs to pending (every pass);
* ``reap`` — expire lost leases, at most one effective pass per ``reap_interval`` across every
  scheduler (a compare-and-set on a shared document elects the pass);
* ``cron`` — fire due schedules (the ``Scheduler`` itself does the work, see runner.py);
* ``alerts`` — offer the alert rules an evaluation (the alert manager keeps its own interval).

A plugin that raises is retried sooner than its period: after ``outage.retry_delay`` (0.5 s,
doubled per failure in a row, at most its ``retry_cap``: ``RETRY_AFTER`` unless it says
otherwise, the reaper's own interval), and logged once per run of failures; the others still
run.
The duties match Oban's plugins (Stager, Lifeline, Cron), but where each Oban plugin is its own
process with its own timer, ours share one thread: a plugin says when it is due, the loop waits.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..broker.base import Broker, JobStore

log = logging.getLogger("conveyor.scheduler")
RETRY_AFTER = 1.0  # seconds before a plugin that raised is ticked again
_REAPER_DOC = ("maintenance", "reaper")
_PROMOTE_BATCH = 1000
_PROMOTE_ROUNDS = 100  # bounded: a huge backlog is finished by the next passes


class Plugin(ABC):
    """One duty of the scheduler: subclass, name it, implement ``tick``.

    Pass instances to ``app.scheduler(plugins=[...])``; they run after the built-in ones.
    """

    #: shown in logs and in ``Scheduler.plugins``
    name: str = "plugin"
    #: seconds: the longest wait before retrying after ``tick`` raised (the retries back off
    #: from 0.5 s up to this; ``outage.retry_delay``)
    retry_cap: float = RETRY_AFTER

    def start(self, now: float) -> None:  # noqa: B027 - optional hook: empty on purpose
        """Called once, before the first tick (default: nothing)."""

    @abstractmethod
    def tick(self, now: float) -> float | None:
        """Do the duty at ``now``; return the time to run next (None: on the next pass)."""

    def stop(self) -> None:  # noqa: B027 - optional hook: empty on purpose
        """Called when the scheduler's ``run()`` returns (default: nothing)."""


class PromotePlugin(Plugin):
    """Moves due scheduled and retry-scheduled jobs to pending, on every pass."""

    name = "promote"

    def __init__(self, broker: JobStore) -> None:
        self.broker = broker
        self.promoted = 0  # jobs promoted since it was built

    def tick(self, now: float) -> float | None:
        """Promote everything due (in rounds of 1000, at most 100 rounds a pass)."""
        for _ in range(_PROMOTE_ROUNDS):
            moved = self.broker.promote_due(now, limit=_PROMOTE_BATCH)
            self.promoted += moved
            if moved < _PROMOTE_BATCH:
                break
        return None


class ReapPlugin(Plugin):
    """Expires lost leases: one effective pass per ``interval`` over all schedulers.

    A pass counts only once it is done: one that raised (the broker unreachable for a moment)
    is retried by the scheduler's backoff, within ``interval`` at the latest; if this
    scheduler had already won the election, the retry reaps without a second election.
    """

    name = "reap"

    def __init__(self, broker: Broker, interval: float, max_lost: int, owner: str) -> None:
        self.broker = broker
        self.interval = interval
        self.max_lost = max_lost
        self.owner = owner  # the scheduler's id, stored in the election document
        self.reaped = 0
        self._last = -1e18
        self._won: float | None = None  # an election won whose reap has not succeeded yet

    @property
    def retry_cap(self) -> float:  # type: ignore[override]
        """A failed pass is retried within one ``interval`` at the latest."""
        return max(self.interval, 0.01)

    def tick(self, now: float) -> float | None:
        """Reap if no scheduler did within ``interval``; due again ``interval`` after the last
        pass (this scheduler's or another's)."""
        if self._won is not None:
            self._finish(now)
        elif now - self._last >= self.interval:
            self._reap(now)
        return self._last + self.interval

    def _reap(self, now: float) -> None:
        collection, name = _REAPER_DOC
        doc = self.broker.docs.get(collection, name, now)
        mark = {"at": now, "by": self.owner}
        if doc is None:
            self.broker.docs.put(collection, name, mark, now)
        else:
            last = float(doc.get("at") or 0.0)
            if now - last < self.interval:  # another scheduler reaped: check again when due
                self._last = last
                return
            if not self.broker.docs.update_if(collection, name, "at", doc.get("at"), mark, now):
                self._last = now  # another scheduler won this pass
                return
        self._won = now
        self._finish(now)

    def _finish(self, now: float) -> None:
        """Reap at ``now`` for the election this scheduler won (retried until it succeeds;
        the next pass is due ``interval`` after the election, as the others see it)."""
        won = self._won
        assert won is not None
        self.reaped += self.broker.reap_expired(now, max_lost=self.max_lost)
        self._last, self._won = won, None


class CronPlugin(Plugin):
    """Fires due schedules through ``fire_due(now) -> next fire time``; ``sync(now)`` at start
    upserts the code-declared schedules."""

    name = "cron"

    def __init__(
        self,
        fire_due: Callable[[float], float | None],
        sync: Callable[[float], object] | None,
        rescan: float,
    ) -> None:
        self.fire_due = fire_due
        self.sync = sync
        self.rescan = rescan  # schedules added elsewhere are seen within this many seconds

    def start(self, now: float) -> None:
        """Upsert the code-declared schedules."""
        if self.sync is not None:
            self.sync(now)

    def tick(self, now: float) -> float | None:
        """Fire what is due; run again at the next fire time if it comes before the next pass
        (else on the next pass: another process may add a schedule at any time)."""
        upcoming = self.fire_due(now)
        return upcoming if upcoming is not None and upcoming < now + self.rescan else None


class AlertSource(Protocol):
    """What the alerts plugin needs: ``AlertManager.maybe_evaluate``."""

    def maybe_evaluate(self, now: float | None = None) -> object:
        """Evaluate the rules if the source's own interval passed."""
        ...


class AlertsPlugin(Plugin):
    """Offers the alert rules an evaluation on every pass (or every ``interval`` seconds).

    ``source`` builds the alert manager on first use; if that fails (a malformed
    ``CONVEYOR_ALERTS``) it is logged once and the scheduler goes on without alerts.
    """

    name = "alerts"

    def __init__(
        self, source: Callable[[], AlertSource | None], interval: float | None = None
    ) -> None:
        self.source = source
        self.interval = interval
        self._alerts: AlertSource | None = None
        self._failed = False

    @property
    def retry_cap(self) -> float:  # type: ignore[override]
        """A failed evaluation is retried within the alert manager's own interval."""
        interval = getattr(self._alerts, "interval", None)
        if isinstance(interval, int | float) and interval > RETRY_AFTER:
            return float(interval)
        return RETRY_AFTER

    def tick(self, now: float) -> float | None:
        """Offer an evaluation. One that raises is the scheduler's to log and retry (once per
        run of failures, backing off: it was a traceback on every pass)."""
        alerts = self._resolve()
        if alerts is None:
            return None
        alerts.maybe_evaluate(now)
        return None if self.interval is None else now + self.interval

    def _resolve(self) -> AlertSource | None:
        if self._alerts is None and not self._failed:
            try:
                self._alerts = self.source()
            except Exception:
                self._failed = True
                log.exception("alerts are not available; the scheduler will not evaluate them")
        return self._alerts
