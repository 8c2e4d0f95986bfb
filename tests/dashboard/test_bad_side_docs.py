"""Alert states and job progress documents whose fields are not of the types Conveyor writes
(another version, another client, a hand edit): an alert with ``updated_at: "x"`` or
``rule: 5`` broke the overview and alerts pages, the alerts API, ``/metrics`` and
``conveyor status``; a progress of ``1e308`` or NaN broke the job page and ``conveyor job``.
Such fields now read as their defaults (no progress shown), on every backend."""

from __future__ import annotations

import sys
import types
from typing import Any

from click.testing import CliRunner
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.cli.main import cli
from conveyor.monitoring.rules import QueueDepth

ALERT_FIELDS: dict[str, list[Any]] = {
    "updated_at": ["x", [1, None], {"a": 1}, float("inf")],
    "rule": [5, None, [1], {"a": 1}],
    "since": ["yesterday", [1]],
    "fired_count": ["3", 1.5],
    "message": [5, ["a"]],
}
PROGRESS: list[dict[str, Any]] = [
    {"fraction": 1e308, "message": ["a"]},
    {"fraction": float("nan")},
    {"fraction": -5, "message": {"a": 1}},
    {"fraction": "half", "message": 5},
]


def cli_target(app: Conveyor) -> str:
    module = types.ModuleType(f"_side_docs_{id(app)}")
    module.app = app  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return f"{module.__name__}:app"


def test_odd_alert_and_progress_documents_break_nothing(
    api: TestClient, dash_app: Conveyor
) -> None:
    target = cli_target(dash_app)
    dash_app.alerts.add_rule(QueueDepth(threshold=0))
    job = dash_app.enqueue("add", [1, 2])
    dash_app.alerts.evaluate()
    now = dash_app.now()
    [(key, doc)] = dash_app.broker.docs.list("alerts", now).items()
    for field, values in ALERT_FIELDS.items():
        for value in values:
            dash_app.broker.docs.put("alerts", key, {**doc, field: value}, now, ttl=3600)
            for path in ("/", "/alerts", "/api/v1/alerts", "/api/v1/overview", "/metrics"):
                r = api.get(path)
                assert r.status_code == 200, (field, value, path, r.text[-300:])
            result = CliRunner().invoke(cli, ["status", "--app", target])
            assert result.exit_code == 0, (field, value, result.output[-500:])
    for progress in PROGRESS:
        dash_app.broker.docs.put("job_progress", job.id, progress, now, ttl=3600)
        for path in (f"/jobs/{job.id}", f"/api/v1/jobs/{job.id}", "/workers"):
            r = api.get(path)
            assert r.status_code == 200, (progress, path, r.text[-300:])
        result = CliRunner().invoke(cli, ["job", job.id, "--app", target])
        assert result.exit_code == 0, (progress, result.output[-500:])
        assert "progress" not in result.output.split("args")[0], result.output
    sys.modules.pop(target.partition(":")[0], None)


def test_pausing_or_resuming_an_invalid_stored_schedule_is_a_clear_error(
    api: TestClient, dash_app: Conveyor
) -> None:
    """``cron: []`` (or a ``tz`` / ``every`` of the wrong type) made resume raise TypeError:
    a 500 from the page and the API, a traceback from ``conveyor schedules resume``."""
    target = cli_target(dash_app)
    dash_app.schedule_cron("s1", "add", "@hourly", args=[1, 2])
    now = dash_app.now()
    [(key, doc)] = dash_app.broker.docs.list("schedules", now).items()
    for field, value in (("cron", []), ("tz", {}), ("every", [1]), ("cron", {"a": 1})):
        dash_app.broker.docs.put("schedules", key, {**doc, field: value, "paused": True}, now)
        assert api.get("/schedules").status_code == 200
        r = api.post("/api/v1/schedules/s1/resume", json={})
        assert r.status_code == 422, (field, value, r.status_code, r.text[:300])
        result = CliRunner().invoke(cli, ["schedules", "resume", "s1", "--app", target])
        assert result.exit_code == 1 and "invalid" in result.output, result.output[-500:]
    sys.modules.pop(target.partition(":")[0], None)
