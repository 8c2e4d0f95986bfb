"""The scheduler: a loop over its plugins (promote, reap, cron, alerts) and the cron duty.

Any number of schedulers may run against one broker, with no leader. Each pass of a schedule:

1. reads the stored schedule (its ``rev`` and ``next_fire_at``);
2. computes the due fire times up to ``now`` and applies the misfire and overlap policies;
3. enqueues each tick as a job with the deterministic id ``sched:{name}:{fire_ms}`` and the same
   string as idempotency key (TTL of at least two periods), so a second scheduler enqueuing the
   same tick gets ``DuplicateJob`` (recorded as ``duplicate``) instead of a second job;
4. advances ``next_fire_at`` with a compare-and-set on ``rev`` (``docs.update_if``).

Enqueue happens before the advance: a scheduler killed between the two leaves the tick due, and
the next scheduler re-enqueues it under the same id, which dedups. So no tick is lost and none is
doubled. Only the scheduler that wins the compare-and-set records skipped ticks in the history.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..core.state import TERMINAL_STATES
from ..errors import BrokerConfigError, DuplicateJob, ValidationError
from ..outage import REMIND_EVERY, OutageLog, is_connection_error
from ..runtime import as_runtime
from ..task import JobSpec
from ..worker.options import count, identifier, seconds
from .models import (
    COLLECTION,
    Schedule,
    check_stored,
    history_entry,
    history_log,
    job_id_for,
    stored_schedule,
)
from .plan import plan_fires
from .plugins import AlertsPlugin, CronPlugin, Plugin, PromotePlugin, ReapPlugin
from .pluginslots import Slot, next_due, one_line, plugin_failed, plugin_recovered

if TYPE_CHECKING:
    from ..runtime import HasRuntime, Runtime

log = logging.getLogger("conveyor.scheduler")


class Scheduler:
    """Runs the scheduler plugins: promotes due delayed jobs, reaps expired leases, fires
    schedules, offers alerts an evaluation, plus the user's ``plugins``; safe to run many.

    ``tick(now)`` is one deterministic pass over the plugins that are due (use it with
    ``FakeClock`` in tests); ``run()`` repeats it, sleeping until the earliest plugin is due
    and at most ``interval`` seconds, until ``stop()``.
    """

    def __init__(
        self,
        app: Runtime | HasRuntime,
        *,
        interval: float = 0.5,
        reap_interval: float | None = None,
        max_lost: int | None = None,
        alert_interval: float | None = None,
        sync: bool = True,
        id: str | None = None,
        plugins: Iterable[Plugin] = (),
    ) -> None:
        interval = _seconds(interval, "interval")
        try:
            extra = list(plugins)
        except TypeError:  # ``plugins=5``
            raise ValidationError("plugins", "must be a list of Plugin instances") from None
        for plugin in extra:
            if not isinstance(plugin, Plugin):
                kind = type(plugin).__name__
                raise ValidationError("plugins", f"must be conveyor.scheduler.Plugin, got {kind}")
        self.app = app = as_runtime(app)  # the runtime (never the facade)
        self.broker = app.broker
        self.interval = interval
        reap = None if reap_interval is None else _seconds(reap_interval, "reap_interval")
        self.reap_interval = app.settings.reap_interval if reap is None else reap
        self.max_lost = count(max_lost, "max_lost") or app.settings.max_lost
        self.alert_interval = (
            None if alert_interval is None else _seconds(alert_interval, "alert_interval")
        )
        self.sync = sync
        given = identifier(id, "id")
        self.id = given or f"scheduler-{socket.gethostname()}-{os.getpid()}-{id_suffix()}"
        self.enqueued = 0  # jobs enqueued by this scheduler since it was built
        self._invalid: dict[str, str] = {}  # invalid stored schedules logged: name -> reason
        self._failing: dict[str, tuple[str, float]] = {}  # name -> (error, when last logged)
        self._started = False
        self._stopping = threading.Event()
        self._outage = OutageLog.shared(self.broker)  # one line per outage, not per retry
        self._promoter = PromotePlugin(self.broker)
        self._reaper = ReapPlugin(self.broker, self.reap_interval, self.max_lost, self.id)
        sync_schedules = (lambda at: app.schedules.sync(at)) if sync else None
        cron = CronPlugin(self.fire_due, sync_schedules, self.interval)
        alerts = AlertsPlugin(lambda: app.alerts, alert_interval)
        self._slots = [Slot(p) for p in (self._promoter, self._reaper, cron, alerts, *extra)]

    @property
    def plugins(self) -> list[Plugin]:
        """The plugins, in the order a pass runs them (built-in ones first)."""
        return [slot.plugin for slot in self._slots]

    @property
    def promoted(self) -> int:
        """Delayed and retry jobs this scheduler promoted."""
        return self._promoter.promoted

    @property
    def reaped(self) -> int:
        """Expired leases this scheduler reaped."""
        return self._reaper.reaped

    # ------------------------------------------------------------------ one pass
    def start(self, now: float | None = None) -> None:
        """Start every plugin (the cron plugin upserts the code-declared schedules); done
        once, by the first ``tick``."""
        at = self.app.now() if now is None else now
        for slot in self._slots:
            slot.plugin.start(at)
        self._started = True

    def tick(self, now: float | None = None) -> int:
        """One pass at ``now`` (default: the app's clock) over the plugins that are due;
        returns how many jobs it enqueued."""
        at = self.app.now() if now is None else now
        if not self._started:
            self.start(at)
        before = self.enqueued
        for slot in self._slots:
            if slot.due is not None and slot.due > at:
                continue
            try:
                slot.due = next_due(slot, slot.plugin.tick(at))
            except BrokerConfigError:  # wrong password / database: retrying cannot help
                raise
            except Exception as exc:  # one failing duty must not stop the others
                plugin_failed(slot, exc, at, self._outage, self.app.rng)
                continue
            if slot.failures:
                plugin_recovered(slot)
            if slot.plugin is self._promoter:  # it calls the broker on every pass: proof
                self._outage.succeeded(log)  # that the broker is back after an outage
        return self.enqueued - before

    def fire_due(self, now: float) -> float | None:
        """Fire every stored schedule's due ticks; returns the earliest next fire time."""
        next_due: float | None = None
        docs = self.broker.docs.list(COLLECTION, now)
        for name in sorted(docs):
            try:
                count, upcoming = self.fire(stored_schedule(docs[name]), now)
            except ValidationError as exc:  # a stored document that is not valid (any more)
                self._skip_invalid(name, exc)
                continue
            except Exception as exc:  # one broken schedule must not stop the others
                if is_connection_error(exc):  # the broker, not the schedule: the pass stops
                    raise
                self._pass_failed(name, exc, now)
                continue
            self._invalid.pop(name, None)
            if self._failing.pop(name, None) is not None:
                log.info("schedule %r: a pass succeeded again", name)
            self.enqueued += count
            if upcoming is not None and (next_due is None or upcoming < next_due):
                next_due = upcoming
        return next_due

    def fire(self, schedule: Schedule, now: float) -> tuple[int, float | None]:
        """Fire one schedule's due ticks; returns (jobs enqueued, its next fire time or None)."""
        if schedule.paused:
            return 0, None
        if schedule.next_fire_at is not None and schedule.next_fire_at > now:
            return 0, schedule.next_fire_at  # the common case: nothing due, nothing parsed
        plan = plan_fires(check_stored(schedule), now, self.interval)
        if plan is None:
            return 0, schedule.next_fire_at
        entries: list[dict[str, Any]] = []  # what this scheduler did: always recorded
        skips: list[dict[str, Any]] = []  # decisions: recorded by the compare-and-set winner
        if plan.missed > 0 and plan.missed_first is not None:
            extra: dict[str, Any] = {"missed": plan.missed, "through": plan.missed_last}
            if not plan.missed_exact:
                extra["missed_at_least"] = True
            skips.append(
                history_entry(plan.missed_first, None, "skipped-misfire", now, self.id, **extra)
            )
        last_job, last_fire, enqueued = schedule.last_job_id, schedule.last_fire_at, 0
        for fire in plan.fires:
            if schedule.overlap == "skip" and last_job and self._still_running(last_job):
                skips.append(
                    history_entry(fire, None, "skipped-overlap", now, self.id, running=last_job)
                )
                continue
            outcome, job_id, extra = self._enqueue(schedule, fire, now)
            entries.append(history_entry(fire, job_id, outcome, now, self.id, **extra))
            if outcome in ("enqueued", "duplicate"):
                last_job, last_fire = job_id, fire
            enqueued += outcome == "enqueued"
        changes = {
            "next_fire_at": plan.next_fire_at,
            "last_fire_at": last_fire,
            "last_job_id": last_job,
            "rev": schedule.rev + 1,
        }
        won = self.broker.docs.update_if(
            COLLECTION, schedule.name, "rev", schedule.rev, changes, now
        )
        if won:
            entries.extend(skips)
        if entries:
            entries.sort(key=lambda e: (e["fire_at"], e["outcome"]))
            self.broker.logs.append(
                history_log(schedule.name), entries, self.app.settings.retention.history_max
            )
        return enqueued, plan.next_fire_at

    def _enqueue(
        self, schedule: Schedule, fire: float, now: float
    ) -> tuple[str, str | None, dict[str, Any]]:
        """Enqueue one tick under its deterministic id; (outcome, job id, extra history)."""
        job_id = job_id_for(schedule.name, fire)
        period = schedule.spec.next_after(fire) - fire
        options: dict[str, Any] = {
            "job_id": job_id,
            "idempotency_key": job_id,
            "idempotency_ttl": max(
                self.app.settings.idempotency_ttl, 2 * period + schedule.misfire_grace
            ),
            "metadata": {"schedule": schedule.name, "fire_at": fire},
        }
        if schedule.queue is not None:
            options["queue"] = schedule.queue
        elif schedule.task_queue is not None and schedule.task not in self.app.tasks:
            options["queue"] = schedule.task_queue  # the task's queue, as its code declared it
        if schedule.priority is not None:
            options["priority"] = schedule.priority
        spec = JobSpec(schedule.task, tuple(schedule.args), dict(schedule.kwargs), options)
        try:
            handle = self.app.enqueue_many([spec])[0]
        except DuplicateJob:
            return "duplicate", job_id, {}
        except ValidationError as exc:  # bad arguments or payload: record it, do not retry forever
            log.error("schedule %r: tick %s not enqueued: %s", schedule.name, fire, exc)
            return "error", None, {"error": str(exc)}
        return ("duplicate" if handle.duplicate else "enqueued"), handle.id, {}

    def _pass_failed(self, name: str, exc: Exception, now: float) -> None:
        """A schedule's pass raised: it is retried on every pass, but its traceback is logged
        once per error, then one line every ``REMIND_EVERY`` seconds while it lasts (a hook
        that keeps raising must not log twice a second)."""
        what = one_line(f"{type(exc).__name__}: {exc}")
        seen = self._failing.get(name)
        if seen is None or seen[0] != what:
            self._failing[name] = (what, now)
            log.error("schedule %r: pass failed; retrying every pass", name, exc_info=exc)
        elif now - seen[1] >= REMIND_EVERY:
            self._failing[name] = (what, now)
            log.error("schedule %r: pass still failing, retrying every pass: %s", name, what)

    def _skip_invalid(self, name: str, exc: ValidationError) -> None:
        """Log an invalid stored schedule once (again only if the reason changes): it is
        skipped on every pass until fixed or removed, which must not flood the log."""
        reason = one_line(str(exc))
        if self._invalid.get(name) != reason:
            self._invalid[name] = reason
            log.warning("schedule %r is invalid and skipped until fixed: %s", name, reason)

    def _still_running(self, job_id: str) -> bool:
        job = self.broker.get(job_id)
        return job is not None and job.state not in TERMINAL_STATES

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        """Tick until ``stop()``: every ``interval`` seconds, or sooner when a plugin is due;
        then stop the plugins (also when it ends by an error: a ``BrokerConfigError``)."""
        self._stopping.clear()
        log.info("scheduler %s started", self.id)
        try:
            self._loop()
        finally:
            self._stop_plugins()
        log.info("scheduler %s stopped", self.id)

    def _loop(self) -> None:
        tick_lost = False  # the last tick raised on the broker connection (e.g. at start-up)
        while not self._stopping.is_set():
            try:
                self.tick()
            except BrokerConfigError as exc:  # wrong password / database: retrying cannot help
                log.error("scheduler %s: %s: stopping", self.id, exc)
                raise
            except Exception as exc:
                tick_lost = self._outage.failed(exc, "scheduler tick", log)
                if not tick_lost:
                    log.exception("scheduler tick failed; retrying")
                self._stopping.wait(1.0)
                continue
            if tick_lost:
                tick_lost = False
                self._outage.succeeded(log)
            self._stopping.wait(self._sleep_time())

    def _stop_plugins(self) -> None:
        for slot in self._slots:
            try:
                slot.plugin.stop()
            except Exception:
                log.exception("scheduler plugin %r: stop failed", slot.plugin.name)

    def _sleep_time(self) -> float:
        """Until the earliest plugin is due, at most ``interval`` (a plugin without a time
        runs on the next pass), at least 10 ms."""
        dues = [slot.due for slot in self._slots if slot.due is not None]
        if not dues:
            return self.interval
        return min(self.interval, max(0.01, min(dues) - self.app.now()))

    def stop(self) -> None:
        """Ask ``run()`` to return after the current pass."""
        self._stopping.set()


def _seconds(value: object, name: str) -> float:
    """An interval option: a finite number of seconds > 0, else ``ValidationError`` naming
    it (a string raised a TypeError on every pass, infinity an OverflowError in ``run()``)."""
    checked = seconds(value, name, zero_ok=False)
    if checked is None:
        raise ValidationError(name, "must be a finite number > 0, got None")
    return checked


def id_suffix() -> str:
    """A short random suffix so schedulers in one process have distinct ids."""
    return os.urandom(3).hex()
