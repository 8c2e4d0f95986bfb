"""Alert rules, states (firing / acknowledged / resolved), cooldown, log and webhook notifiers."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.errors import ValidationError
from conveyor.monitoring.alerts import AlertManager, LogNotifier, WebhookNotifier
from conveyor.monitoring.rules import (
    CronMissed,
    DeadLetterGrowth,
    FailureRate,
    NoLiveWorker,
    OldestPendingAge,
    QueueDepth,
    rule_from_dict,
)


class Recorder:
    """A notifier that remembers every payload."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def notify(self, payload: Mapping[str, Any]) -> bool:
        self.sent.append(dict(payload))
        return True

    @property
    def states(self) -> list[str]:
        return [p["state"] for p in self.sent]


def manager(app: Conveyor, *rules: Any, cooldown: float = 300.0) -> tuple[AlertManager, Recorder]:
    rec = Recorder()
    return AlertManager(app, rules=list(rules), notifiers=[rec], cooldown=cooldown), rec


def test_depth_rule_fires_once_respects_cooldown_and_resolves(
    dash_app: Conveyor, clock: FakeClock
) -> None:
    alerts, rec = manager(dash_app, QueueDepth(threshold=10))
    for i in range(10):
        dash_app.enqueue("add", [i, i])
    assert alerts.evaluate() == [] and rec.sent == []
    dash_app.enqueue("add", [10, 10])  # 11 > 10
    changed = alerts.evaluate()
    assert [(s.key, s.state) for s in changed] == [("queue_depth:default", "firing")]
    assert rec.states == ["firing"] and "11 pending" in rec.sent[0]["message"]
    for _ in range(3):  # still violating: no new notification
        clock.advance(60)
        alerts.evaluate()
    assert rec.states == ["firing"]
    dash_app.worker().run_until_idle()  # drain
    assert [s.state for s in alerts.evaluate()] == ["resolved"]
    assert rec.states == ["firing", "resolved"]
    # Violated again inside the cooldown: the state fires, the notification is held back.
    for i in range(11):
        dash_app.enqueue("add", [i, i])
    clock.advance(10)
    assert [s.state for s in alerts.evaluate()] == ["firing"]
    assert rec.states == ["firing", "resolved"]
    assert alerts.get("queue_depth:default").notified is False  # type: ignore[union-attr]
    dash_app.worker().run_until_idle()
    alerts.evaluate()
    assert rec.states == ["firing", "resolved"]  # a silent firing resolves silently
    # After the cooldown a new violation notifies again.
    clock.advance(400)
    for i in range(11):
        dash_app.enqueue("add", [i, i])
    alerts.evaluate()
    assert rec.states == ["firing", "resolved", "firing"]
    state = alerts.get("queue_depth:default")
    assert state is not None and state.fired_count == 3


def test_states_live_in_the_broker_and_acknowledge(dash_app: Conveyor, clock: FakeClock) -> None:
    alerts, rec = manager(dash_app, QueueDepth(threshold=0, name="busy"))
    dash_app.enqueue("add", [1, 1])
    alerts.evaluate()
    other = AlertManager(dash_app)  # another process sees the same state
    assert [s.key for s in other.firing()] == ["busy:default"]
    assert other.acknowledge("busy:default", by="alice")
    assert not other.acknowledge("busy:default")  # no longer firing
    assert not other.acknowledge("nope:default")
    alerts.evaluate()
    state = alerts.get("busy:default")
    assert state is not None and state.state == "acknowledged" and state.acknowledged_by == "alice"
    dash_app.worker().run_until_idle()
    alerts.evaluate()
    assert alerts.get("busy:default").state == "resolved"  # type: ignore[union-attr]
    assert rec.states == ["firing", "resolved"]
    assert alerts.firing() == [] and len(alerts.states()) == 1


def test_maybe_evaluate_respects_the_interval(dash_app: Conveyor, clock: FakeClock) -> None:
    alerts, _ = manager(dash_app, QueueDepth(threshold=0))
    alerts.interval = 30
    assert alerts.maybe_evaluate() == []
    dash_app.enqueue("add", [1, 1])
    assert alerts.maybe_evaluate() is None  # too soon
    clock.advance(30)
    assert [s.state for s in alerts.maybe_evaluate() or []] == ["firing"]


def test_oldest_pending_and_failure_rate(dash_app: Conveyor, clock: FakeClock) -> None:
    alerts, _ = manager(
        dash_app, OldestPendingAge(seconds=60), FailureRate(percent=20, window=5, min_jobs=2)
    )
    dash_app.enqueue("add", [1, 1])
    clock.advance(61)
    assert [s.key for s in alerts.evaluate()] == ["oldest_pending_age:default"]
    dash_app.enqueue("boom")
    dash_app.worker().run_until_idle()  # 1 of 2 failed: 50 % > 20 %
    keys = {s.key: s.state for s in alerts.evaluate()}
    assert keys == {"failure_rate:default": "firing", "oldest_pending_age:default": "resolved"}
    clock.advance(6 * 60)  # the failure leaves the window
    assert {s.key: s.state for s in alerts.evaluate()} == {"failure_rate:default": "resolved"}


def test_dead_letter_growth(dash_app: Conveyor, clock: FakeClock) -> None:
    alerts, _ = manager(dash_app, DeadLetterGrowth(increase=1, window=10))
    alerts.evaluate()
    dash_app.enqueue("boom")
    dash_app.worker().run_until_idle()
    clock.advance(60)
    assert alerts.evaluate() == []  # grew by 1, not more than 1
    dash_app.enqueue("boom")
    dash_app.worker().run_until_idle()
    clock.advance(60)
    assert [s.state for s in alerts.evaluate()] == ["firing"]
    clock.advance(11 * 60)  # no growth within the window any more
    assert [s.state for s in alerts.evaluate()] == ["resolved"]


def test_no_live_worker(dash_app: Conveyor, clock: FakeClock) -> None:
    alerts, _ = manager(dash_app, NoLiveWorker(), NoLiveWorker(queue="emails", name="mail"))
    dash_app.enqueue("add", [1, 1])
    assert {s.key for s in alerts.evaluate()} == {"no_live_worker:default", "mail:emails"}
    dash_app.broker.doc_put(
        "workers", "w1", {"id": "w1", "queues": ["default", "emails:2"]}, clock.now(), ttl=10
    )
    assert {s.state for s in alerts.evaluate()} == {"resolved"}
    clock.advance(11)  # the heartbeat expired: the worker is gone
    assert len(alerts.evaluate()) == 2


def test_cron_missed(dash_app: Conveyor, clock: FakeClock) -> None:
    @dash_app.every(60, name="tick")
    def tick() -> None:
        pass

    alerts, _ = manager(dash_app, CronMissed(grace=30))
    dash_app.schedules.sync()
    assert alerts.evaluate() == []
    clock.advance(60 + 31)  # due 60 s from now; nobody fired it for 31 s more
    assert [s.key for s in alerts.evaluate()] == ["cron_missed:tick"]
    dash_app.scheduler().tick()
    assert [s.state for s in alerts.evaluate()] == ["resolved"]
    dash_app.pause_schedule("tick")
    clock.advance(600)
    assert alerts.evaluate() == []  # paused schedules are not late


def test_rules_from_config_and_env(dash_app: Conveyor, tmp_path: Any) -> None:
    rule = rule_from_dict({"type": "failure_rate", "percent": 5, "window": 10, "queue": "q"})
    assert isinstance(rule, FailureRate) and rule.window == 10 and rule.name == "failure_rate"
    for bad, field in (
        ({"type": "nope"}, "alerts.type"),
        ({"type": "queue_depth", "x": 1}, "alerts.x"),
        ({"type": "queue_depth", "threshold": -1}, "alerts.threshold"),
        ({"type": "queue_depth", "queue": "a b"}, "alerts.queue"),
    ):
        with pytest.raises(ValidationError) as info:
            rule_from_dict(bad)
        assert info.value.field == field
    path = tmp_path / "alerts.json"
    path.write_text(
        json.dumps(
            {
                "rules": [{"type": "queue_depth", "threshold": 5}],
                "cooldown": 60,
                "webhook": "http://127.0.0.1:9/x",
            }
        )
    )
    alerts = AlertManager(dash_app)
    alerts.configure_from_env({"CONVEYOR_ALERTS": f"@{path}"})
    assert [r.name for r in alerts.rules] == ["queue_depth"] and alerts.cooldown == 60
    assert isinstance(alerts.notifiers[0], LogNotifier)
    assert isinstance(alerts.notifiers[1], WebhookNotifier)
    with pytest.raises(ValidationError):
        alerts.add_rule({"type": "queue_depth"})  # duplicate name
    with pytest.raises(ValidationError):
        alerts.configure_from_env({"CONVEYOR_ALERTS": "{not json"})
    with pytest.raises(ValidationError):
        WebhookNotifier("ftp://x")


@pytest.mark.parametrize(
    ("text", "field", "rule"),
    [
        ('{"cooldown": 1e99}', "alerts.cooldown", "must be at most 3153600000 seconds"),
        ('{"interval": NaN}', "alerts.interval", "must be a finite number >= 0"),
        ('{"repeat_interval": -5}', "alerts.repeat_interval", "must be a finite number >= 0"),
        ('{"cooldown": "ten minutes"}', "alerts.cooldown", "must be a number"),
    ],
)
def test_alert_durations_from_the_environment_are_checked(
    dash_app: Conveyor, text: str, field: str, rule: str
) -> None:
    """``CONVEYOR_ALERTS``' durations were taken as ``float(value)``: 1e99 or NaN was kept (a
    NaN cooldown never held a notification back), a word raised a bare ValueError."""
    alerts = AlertManager(dash_app)
    with pytest.raises(ValidationError) as info:
        alerts.configure_from_env({"CONVEYOR_ALERTS": text})
    assert info.value.field == field and rule in info.value.rule
    assert (alerts.cooldown, alerts.interval, alerts.repeat_interval) == (300.0, 30.0, None)
    alerts.configure_from_env({"CONVEYOR_ALERTS": '{"cooldown": "600", "interval": 3153600000}'})
    assert (alerts.cooldown, alerts.interval) == (600.0, 3153600000.0)


def test_app_alerts_is_one_manager(dash_app: Conveyor) -> None:
    assert dash_app.alerts is dash_app.alerts
    assert isinstance(dash_app.alerts.notifiers[0], LogNotifier)


def test_log_notifier(dash_app: Conveyor, caplog: pytest.LogCaptureFixture) -> None:
    alerts = AlertManager(dash_app, rules=[QueueDepth(threshold=0)])
    dash_app.enqueue("add", [1, 1])
    with caplog.at_level(logging.WARNING, logger="conveyor.alerts"):
        alerts.evaluate()
    assert "queue_depth:default firing" in caplog.text


class Receiver:
    """A local HTTP receiver on 127.0.0.1 that fails the first ``failures`` POSTs with 500."""

    def __init__(self, failures: int = 0, status: int = 500) -> None:
        self.failures, self.status = failures, status
        self.bodies: list[dict[str, Any]] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.attempts += 1
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.attempts <= receiver.failures:
                    self.send_response(receiver.status)
                else:
                    receiver.bodies.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(failures=2)
    yield r
    r.server.shutdown()


def test_webhook_posts_json_with_retry(dash_app: Conveyor, receiver: Receiver) -> None:
    sleeps: list[float] = []
    hook = WebhookNotifier(receiver.url, retries=3, backoff=0.1, sleep=sleeps.append)
    alerts = AlertManager(dash_app, rules=[QueueDepth(threshold=0)], notifiers=[hook])
    dash_app.enqueue("add", [1, 1])
    alerts.evaluate()
    assert receiver.attempts == 3 and sleeps == [0.1, 0.2]
    [body] = receiver.bodies
    assert body["alert"] == "queue_depth:default" and body["state"] == "firing"
    assert body["rule"] == "queue_depth" and body["subject"] == "default"


def test_webhook_gives_up(caplog: pytest.LogCaptureFixture) -> None:
    r = Receiver(failures=100)
    try:
        hook = WebhookNotifier(r.url, retries=2, backoff=0, sleep=lambda s: None)
        with caplog.at_level(logging.ERROR, logger="conveyor.alerts"):
            assert hook.notify({"alert": "a", "state": "firing"}) is False
        assert r.attempts == 3 and "HTTP 500" in caplog.text
        bad_request = Receiver(failures=100, status=400)
        assert WebhookNotifier(bad_request.url, retries=5, sleep=lambda s: None).notify({}) is False
        assert bad_request.attempts == 1  # a 4xx is not retried
        bad_request.server.shutdown()
        unreachable = WebhookNotifier(
            "http://127.0.0.1:9/", retries=1, timeout=1, sleep=lambda s: None
        )
        assert unreachable.notify({}) is False
    finally:
        r.server.shutdown()


def test_a_failing_webhook_is_logged_without_its_secret_path_or_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Slack/Teams-style webhook URLs carry their secret in the path (others in the query):
    the error line names the receiver, never the secret."""
    r = Receiver(failures=100)
    try:
        host = r.url.split("://", 1)[1].split("/", 1)[0]
        url = f"http://{host}/services/T0/B0/tok-s3cret?key=q-s3cret"
        hook = WebhookNotifier(url, retries=0, sleep=lambda s: None)
        with caplog.at_level(logging.ERROR, logger="conveyor.alerts"):
            assert hook.notify({"alert": "a", "state": "firing"}) is False
        assert r.attempts == 1 and "HTTP 500" in caplog.text
        assert "s3cret" not in caplog.text and host in caplog.text
    finally:
        r.server.shutdown()
