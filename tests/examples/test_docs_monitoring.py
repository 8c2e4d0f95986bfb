"""docs/monitoring.md names real things: every event type, JSON API route, alert rule and
field, the alert configuration example and webhook payload, and the dashboard's security
bounds are what the code has (each check parses the page, so neither side drifts alone)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conveyor import Conveyor

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- event types
def test_the_event_table_lists_every_event_type() -> None:
    from conveyor.broker.records import EVENT_TYPES

    text = (ROOT / "docs" / "monitoring.md").read_text("utf-8")
    section = text.split("## Events", 1)[1].split("Read it from any process", 1)[0]
    documented = [
        n
        for cell in re.findall(r"^\| (.+?) \|", section, re.M)
        for n in re.findall(r"`(\w+)`", cell)
    ]
    assert sorted(documented) == sorted(EVENT_TYPES)


# ---------------------------------------------------------------------- the JSON API
def api_routes() -> set[tuple[str, str]]:
    """(method, path) of every route under the dashboard's /api/v1 (``{param}`` kept)."""
    from conveyor.dashboard import DashboardConfig, create_app

    found = set()
    stack: list[tuple[str, object]] = [("", create_app(Conveyor("memory://"), DashboardConfig()))]
    while stack:
        prefix, app = stack.pop()
        for route in getattr(app, "routes", []):
            path = prefix + re.sub(r":\w+}", "}", getattr(route, "path", ""))
            sub = route if hasattr(route, "routes") else getattr(route, "app", None)
            if sub is not None and hasattr(sub, "routes"):
                stack.append((path, sub))
            else:
                found |= {(m, path) for m in getattr(route, "methods", None) or ()}
    return {(m, p.removeprefix("/api/v1")) for m, p in found if p.startswith("/api/v1/")}


def documented_api_calls() -> set[tuple[str, str]]:
    """(method or "", path under /api/v1) of every API call monitoring.md names (query strings
    dropped; ``a|b`` in the last segment is two calls; an encoded example path is left out)."""
    text = (ROOT / "docs" / "monitoring.md").read_text("utf-8")
    spans = [("", p) for p in re.findall(r"/api/v1(/[\w{}/.%-]*)", text)]
    section = text.split("### HTTP JSON API", 1)[1].split("\n## ", 1)[0]
    for span in re.findall(r"`((?:(?:GET|POST|DELETE) )?/[^`\s]*)`", section):
        if not span.startswith("/api/v1"):
            method, _, path = span.rpartition(" ")
            spans.append((method, path))
    calls = set()
    for method, path in spans:
        head, _, tail = path.split("?", 1)[0].rpartition("/")
        calls |= {(method, f"{head}/{last}") for last in tail.split("|") if "%" not in path}
    return calls - {("", "/")}


def test_every_api_call_the_docs_name_exists() -> None:
    routes = api_routes()
    ids = {"zz": "{id}"}  # an example id stands for the parameter
    missing = []
    for method, path in sorted(documented_api_calls()):
        path = "/".join(ids.get(part, part) for part in path.split("/"))
        if not any(p == path and method in ("", m) for m, p in routes):
            missing.append(f"{method or 'ANY'} /api/v1{path}")
    assert missing == []
    assert len(documented_api_calls()) > 25


# ---------------------------------------------------------------------- alert rules
def test_the_alert_rule_table_names_real_rules_and_fields() -> None:
    """monitoring.md's rule table: each class, its ``type`` name, and every field named in the
    row (the condition's and the options') is a field of that rule; every rule is listed."""
    import dataclasses

    from conveyor.monitoring import rules

    text = (ROOT / "docs" / "monitoring.md").read_text("utf-8")
    section = text.split("## Alerts", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` / `(\w+)` \| (.+) \| (.+) \|$", section, re.M)
    listed = set()
    for cls_name, type_name, condition, options in rows:
        cls = getattr(rules, cls_name)
        fields = {f.name for f in dataclasses.fields(cls)}
        assert (
            cls().type == type_name and rules.rule_from_dict({"type": type_name}).type == type_name
        )
        named = set(re.findall(r"`(\w+)`", condition + options))
        assert named <= fields, (cls_name, named - fields)
        listed.add(cls)
    every = {c for c in vars(rules).values() if isinstance(c, type) and issubclass(c, rules.Rule)}
    assert listed == every - {rules.Rule}


def test_the_alert_config_and_payload_are_as_documented() -> None:
    """monitoring.md: CONVEYOR_ALERTS' example is accepted as shown, the defaults it states
    hold, and a notifier receives exactly the documented payload keys and message."""
    import inspect

    from conveyor.monitoring.alerts import AlertManager, WebhookNotifier

    text = (ROOT / "docs" / "monitoring.md").read_text("utf-8")
    section = text.split("## Alerts", 1)[1].split("\n## ", 1)[0]
    raw = re.search(r"export CONVEYOR_ALERTS='(.*?)'", section, re.S).group(1)  # type: ignore[union-attr]
    documented = json.loads(re.search(r"^```json\n(.*?)^```", section, re.M | re.S).group(1))  # type: ignore[union-attr]
    assert "**Cooldown** (default 300 s)" in section and AlertManager.cooldown == 300
    params = inspect.signature(WebhookNotifier).parameters
    shown = re.search(r"`WebhookNotifier\(url, (.*?), headers=\.\.\.\)`", section).group(1)  # type: ignore[union-attr]
    for name, value in (pair.split("=") for pair in shown.split(", ")):
        assert params[name].default == float(value), name

    app = Conveyor("memory://")
    app.alerts.configure_from_env({"CONVEYOR_ALERTS": raw})
    assert [r.type for r in app.alerts.rules] == ["queue_depth", "cron_missed"]
    assert app.alerts.cooldown == 600
    assert any(isinstance(n, WebhookNotifier) for n in app.alerts.notifiers)

    class Collect:
        payloads: list[dict[str, object]] = []

        def notify(self, payload: dict[str, object]) -> bool:
            self.payloads.append(payload)
            return True

    app = Conveyor("memory://")
    app.alerts.add_rule({"type": "queue_depth", "threshold": 1000, "queue": "emails"})
    app.alerts.add_notifier(Collect())
    for _ in range(1204):
        app.enqueue("send", queue="emails")
    app.alerts.evaluate(app.now())
    (payload,) = Collect.payloads
    assert set(payload) == set(documented)
    assert payload["message"] == documented["message"]


def test_the_dashboard_security_numbers_are_the_code_s() -> None:
    """monitoring.md's "Security settings": the bounds and defaults it states."""
    from conveyor.dashboard import security

    text = (ROOT / "docs" / "monitoring.md").read_text("utf-8")
    section = text.split("## Security settings", 1)[1].split("\n* **", 1)[0]
    config = security.DashboardConfig()
    stated = {
        f"bearer token (≥ {security.MIN_TOKEN} characters)",
        f"password ≥ {security.MIN_PASSWORD} characters; username defaults to `admin`",
        f"(default {config.rate_limit:g}, burst {config.rate_burst};",
        f"`max_body` — {config.max_body // 1024} KiB",
        f"`max_api_body` — {config.max_api_body // 1024 // 1024} MiB",
    }
    assert {s for s in stated if s not in section} == set()
    assert (
        security.DashboardConfig.from_env({"CONVEYOR_DASHBOARD_PASSWORD": "p" * 8}).username
        == "admin"
    )
