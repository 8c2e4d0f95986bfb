"""Alerts: rules evaluated periodically, states stored in the broker, notifiers with a cooldown.

``app.alerts`` is an ``AlertManager``. The scheduler process calls ``maybe_evaluate(now)`` on
every tick (an evaluation happens at most once per ``interval``); ``evaluate(now)`` forces one.

Each violation of a rule is an alert keyed ``<rule>:<subject>`` with a state document in the
broker (collection ``alerts``), so every process — dashboard, CLI, several schedulers — sees
the same state:

* ``firing``        — the condition holds; notifiers were told (unless within the cooldown);
* ``acknowledged``  — an operator acknowledged it; no reminders until it resolves;
* ``resolved``      — the condition cleared; notifiers are told it resolved.

Cooldown: at most one "firing" notification per alert per ``cooldown`` seconds, so a
flapping condition does not page anyone twice. Transitions are compare-and-set on a version
field: with several schedulers each transition is notified once.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..core.job import validate_duration
from ..errors import ValidationError
from ..runtime import HasRuntime, Runtime, as_runtime
from .notifiers import LogNotifier, Notifier, WebhookNotifier
from .rules import AlertContext, Rule, Violation, rule_from_dict

log = logging.getLogger("conveyor.alerts")
COLLECTION = "alerts"
STATES = ("firing", "acknowledged", "resolved")
__all__ = [
    "AlertManager",
    "AlertState",
    "LogNotifier",
    "Notifier",
    "WebhookNotifier",
    "build_manager",
]


@dataclass
class AlertState:
    """The stored state of one alert."""

    key: str
    rule: str
    subject: str
    state: str = "resolved"
    severity: str = "warning"
    message: str = ""
    value: float = 0.0
    since: float | None = None  # when it last started firing
    updated_at: float = 0.0
    resolved_at: float | None = None
    acknowledged_at: float | None = None
    acknowledged_by: str | None = None
    last_notified_at: float | None = None
    notified: bool = False  # the current firing was notified (not suppressed by the cooldown)
    fired_count: int = 0
    version: int = 0

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> AlertState:
        """Rebuild from a broker document (unknown fields ignored; a field of the wrong type —
        another version, a hand edit — reads as its default instead of breaking every page,
        ``/metrics`` and ``conveyor status``)."""
        plain = cls(key="", rule="", subject="")
        known = {
            k: v
            for k, v in doc.items()
            if k in cls.__dataclass_fields__ and _fits(k, v, getattr(plain, k))
        }
        return replace(plain, **known)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @property
    def active(self) -> bool:
        """Firing or acknowledged."""
        return self.state != "resolved"


def _fits(name: str, value: Any, default: Any) -> bool:
    """``value`` has the type of field ``name`` (whose default is ``default``)."""
    if value is None or isinstance(default, bool) or isinstance(value, bool):
        return value is default is None or (isinstance(value, bool) and isinstance(default, bool))
    if isinstance(default, str) or name == "acknowledged_by":
        return isinstance(value, str)
    if isinstance(default, int) and not isinstance(default, float):
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


_DURATIONS = ("cooldown", "interval", "repeat_interval")


def _duration(value: Any, key: str) -> float:
    """A configured duration in seconds: a number, or a string of one (was ``float(value)``:
    1e99 or NaN kept, a NaN cooldown never held a notification back)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValidationError(f"alerts.{key}", f"must be a number, got {value!r}") from None
    return validate_duration(value, f"alerts.{key}")


@dataclass
class AlertManager:
    """Rules, notifiers and the alert states of one app (see the module docstring)."""

    app: Runtime | HasRuntime  # the app or its runtime; the manager keeps the runtime
    rules: list[Rule] = field(default_factory=list)
    notifiers: list[Notifier] = field(default_factory=list)
    cooldown: float = 300.0
    interval: float = 30.0
    repeat_interval: float | None = None  # re-notify a still-firing alert this often
    _last_eval: float | None = field(default=None, init=False, repr=False)
    runtime: Runtime = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.runtime = as_runtime(self.app)
        if not self.notifiers:
            self.notifiers = [LogNotifier()]

    # ------------------------------------------------------------------ configuration
    def add_rule(self, rule: Rule | Mapping[str, Any]) -> Rule:
        """Add a rule (an object or a config dict); names must be unique."""
        built = rule if isinstance(rule, Rule) else rule_from_dict(rule)
        if any(r.name == built.name for r in self.rules):
            raise ValidationError("alerts.name", f"a rule named {built.name!r} already exists")
        self.rules.append(built)
        return built

    def add_notifier(self, notifier: Notifier) -> None:
        """Send notifications to one more notifier."""
        self.notifiers.append(notifier)

    def configure(self, config: Mapping[str, Any]) -> None:
        """Apply ``{"rules": [...], "webhook": url, "cooldown": s, "interval": s}``; a duration
        that is not a number of seconds in [0, ``MAX_DELAY``] raises ``ValidationError``
        (``alerts.<key>``) before anything is applied."""
        durations = {k: _duration(config[k], k) for k in _DURATIONS if config.get(k) is not None}
        for rule in config.get("rules", []):
            self.add_rule(rule)
        hooks = config.get("webhook") or []
        for url in [hooks] if isinstance(hooks, str) else hooks:
            self.add_notifier(WebhookNotifier(str(url)))
        for key, seconds in durations.items():
            setattr(self, key, seconds)

    def configure_from_env(self, environ: Mapping[str, str] | None = None) -> None:
        """Read ``CONVEYOR_ALERTS`` (JSON, or ``@path`` to a JSON file) and
        ``CONVEYOR_ALERT_WEBHOOK`` (a URL)."""
        env = os.environ if environ is None else environ
        raw = env.get("CONVEYOR_ALERTS")
        if raw:
            text = raw
            if raw.startswith("@"):
                with open(raw[1:], encoding="utf-8") as fh:
                    text = fh.read()
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise ValidationError("CONVEYOR_ALERTS", f"is not valid JSON: {exc}") from exc
            self.configure({"rules": data} if isinstance(data, list) else data)
        if env.get("CONVEYOR_ALERT_WEBHOOK"):
            self.add_notifier(WebhookNotifier(env["CONVEYOR_ALERT_WEBHOOK"]))

    # ------------------------------------------------------------------ reading
    def states(self, include_resolved: bool = True) -> list[AlertState]:
        """Every stored alert state, active ones first, newest first."""
        docs = self.runtime.broker.docs.list(COLLECTION, self.runtime.now())
        states = [AlertState.from_doc(d) for d in docs.values()]
        if not include_resolved:
            states = [s for s in states if s.active]
        return sorted(states, key=lambda s: (s.state == "resolved", -(s.updated_at or 0)))

    def firing(self) -> list[AlertState]:
        """Alerts that are firing or acknowledged."""
        return self.states(include_resolved=False)

    def get(self, key: str) -> AlertState | None:
        """One alert state, or None."""
        doc = self.runtime.broker.docs.get(COLLECTION, key, self.runtime.now())
        return None if doc is None else AlertState.from_doc(doc)

    def acknowledge(self, key: str, by: str = "") -> bool:
        """Acknowledge a firing alert (no reminders until it resolves); False if not firing."""
        state = self.get(key)
        if state is None or state.state != "firing":
            return False
        now = self.runtime.now()
        return self.runtime.broker.docs.update_if(
            COLLECTION,
            key,
            "version",
            state.version,
            {
                "state": "acknowledged",
                "acknowledged_at": now,
                "acknowledged_by": by or None,
                "updated_at": now,
                "version": state.version + 1,
            },
            now,
        )

    # ------------------------------------------------------------------ evaluation
    def maybe_evaluate(self, now: float | None = None) -> list[AlertState] | None:
        """Evaluate if ``interval`` passed since the last evaluation in this process."""
        at = self.runtime.now() if now is None else now
        if self._last_eval is not None and at - self._last_eval < self.interval:
            return None
        previous = self._last_eval
        try:
            return self.evaluate(at)
        except BaseException:  # it did not happen: the caller retries sooner than interval
            self._last_eval = previous
            raise

    def evaluate(self, now: float | None = None) -> list[AlertState]:
        """Check every rule once; return the alerts whose state changed."""
        at = self.runtime.now() if now is None else now
        self._last_eval = at
        ctx = AlertContext(self.runtime, at)
        stored = {s.key: s for s in self.states()}
        changed: list[AlertState] = []
        seen: set[str] = set()
        for rule in self.rules:
            try:
                violations = rule.check(ctx)
            except Exception:
                log.exception("alert rule %s failed; skipped this round", rule.name)
                seen.update(k for k, s in stored.items() if s.rule == rule.name)
                continue
            for v in violations:
                key = f"{rule.name}:{v.subject}"
                seen.add(key)
                result = self._violating(rule, v, stored.get(key), at)
                if result is not None:
                    changed.append(result)
        mine = {rule.name for rule in self.rules}  # other processes may run other rules
        for key, state in stored.items():
            if key not in seen and state.active and state.rule in mine:
                result = self._cleared(state, at)
                if result is not None:
                    changed.append(result)
        return changed

    def _violating(
        self, rule: Rule, v: Violation, old: AlertState | None, now: float
    ) -> AlertState | None:
        if old is None:
            old = AlertState(key=f"{rule.name}:{v.subject}", rule=rule.name, subject=v.subject)
            self.runtime.broker.docs.put(COLLECTION, old.key, old.to_dict(), now)
        new = AlertState(**old.to_dict())
        new.message, new.value, new.severity, new.updated_at = (
            v.message,
            v.value,
            rule.severity,
            now,
        )
        notify = None
        if old.state == "resolved":
            new.state, new.since, new.resolved_at = "firing", now, None
            new.acknowledged_at = new.acknowledged_by = None
            new.fired_count += 1
            quiet = old.last_notified_at is not None and now - old.last_notified_at < self.cooldown
            new.notified = not quiet
            notify = None if quiet else "firing"
        elif old.state == "firing" and self.repeat_interval is not None:
            last = old.last_notified_at or old.since or now
            if now - last >= max(self.repeat_interval, self.cooldown):
                new.notified, notify = True, "firing"
        if notify:
            new.last_notified_at = now
        changed = old.state != new.state
        if not changed and not notify and (old.message, old.value) == (new.message, new.value):
            return None
        if not self._store(old, new, now):
            return None
        if notify:
            self._notify(new, notify)
        return new if changed or notify else None

    def _cleared(self, old: AlertState, now: float) -> AlertState | None:
        new = AlertState(**old.to_dict())
        new.state, new.resolved_at, new.updated_at = "resolved", now, now
        if not self._store(old, new, now):
            return None
        if old.notified:
            self._notify(new, "resolved")
        return new

    def _store(self, old: AlertState, new: AlertState, now: float) -> bool:
        new.version = old.version + 1
        return self.runtime.broker.docs.update_if(
            COLLECTION, old.key, "version", old.version, new.to_dict(), now
        )

    def _notify(self, state: AlertState, kind: str) -> None:
        payload = {
            "alert": state.key,
            "rule": state.rule,
            "subject": state.subject,
            "state": kind,
            "severity": state.severity,
            "message": state.message,
            "value": state.value,
            "since": state.since,
            "at": state.updated_at,
        }
        for notifier in self.notifiers:
            try:
                notifier.notify(payload)
            except Exception:
                log.exception("notifier %s failed", type(notifier).__name__)


def build_manager(app: Runtime | HasRuntime, rules: Iterable[Rule] = ()) -> AlertManager:
    """The manager ``app.alerts`` returns: configured from ``CONVEYOR_ALERTS`` and friends."""
    manager = AlertManager(app, rules=list(rules))
    manager.configure_from_env()
    return manager
