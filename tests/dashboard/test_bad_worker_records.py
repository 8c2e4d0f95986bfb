"""A worker record (heartbeat document) whose fields are not of the types Conveyor writes —
another version, another client, a hand edit: ``queues: 5``, ``running: true``,
``weights: "x"``, ``jobs: [1, null, {}]`` — took down the overview, workers and queues pages,
their fragments, the API, ``/metrics`` and ``conveyor status`` / ``queues`` / ``quiet`` (500s
and TypeError tracebacks). Such fields now read as empty; every page answers and the record's
worker still shows, on every backend."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.cli.main import cli
from conveyor.worker.presence import COLLECTION

WEIRD: dict[str, list[Any]] = {
    "queues": [5, 1e308, True, {"a": 1}, [None, 3]],
    "running": [-1, True, "abc", {"x": 1}],
    "jobs": [-1, True, [1, None, {"a": 1}], "abc"],
    "weights": ["x", -1, [1, 2], {"default": "heavy"}, {"default": None}],
}
PAGES = ["/", "/workers", "/fragments/workers", "/queues", "/fragments/queues"]
PAGES += ["/api/v1/workers", "/api/v1/overview", "/api/v1/queues", "/metrics"]


def record(app: Conveyor, field: str, value: Any) -> None:
    now = app.now()
    doc = {
        "id": "w-odd",
        "host": "h",
        "pid": 7,
        "queues": ["default"],
        "concurrency": 2,
        "running": [],
        "jobs": [],
        "started_at": now,
        "state": "running",
        "heartbeat_at": now,
        field: value,
    }
    app.broker.docs.put(COLLECTION, "w-odd", doc, now, ttl=60)


@pytest.mark.parametrize("field", sorted(WEIRD))
def test_a_wrongly_typed_worker_record_breaks_nothing(
    api: TestClient, dash_app: Conveyor, field: str
) -> None:
    module = types.ModuleType(f"_odd_workers_{id(dash_app)}")
    module.app = dash_app  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        for value in WEIRD[field]:
            record(dash_app, field, value)
            for path in PAGES:
                r = api.get(path)
                assert r.status_code == 200, (field, value, path, r.text[-300:])
            assert "w-odd" in api.get("/workers").text
            for command in (["status"], ["queues"], ["quiet", "w-odd"]):
                result = CliRunner().invoke(cli, [*command, "--app", f"{module.__name__}:app"])
                assert result.exit_code == 0, (field, value, command, result.output[-500:])
    finally:
        sys.modules.pop(module.__name__, None)
