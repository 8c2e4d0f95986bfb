"""Issue 13, hostile item 9 over HTTP: values that cannot be stored answer 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.dashboard.api import PREFIX as V1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"task": "add", "run_at": 1e400}', "body"),  # orjson refuses infinity
        (b'{"task": "add", "run_at": "tomorrow"}', "run_at"),
        (b'{"task": "add", "idempotency_ttl": -1}', "idempotency_ttl"),
        (b'{"task": "add", "idempotency_ttl": "300"}', "idempotency_ttl"),
        (b'{"task": "add", "max_attempts": 10000000000}', "max_attempts"),
        (b'{"task": "add", "queue": "default\\n"}', "queue"),
        (b'{"task": "add", "job_id": "a/b"}', "job_id"),
        (b'{"task": "add", "args": [' + b"[" * 600 + b"]" * 600 + b"]}", "args"),
        (b'{"task": "add", "kwargs": {"k": ' + b"[" * 300 + b"]" * 300 + b"}}", "kwargs"),
    ],
)
def test_enqueue_refuses_values_that_cannot_be_stored(
    api: TestClient, dash_app: Conveyor, body: bytes, field: str
) -> None:
    r = api.post(f"{V1}/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    answer: dict[str, Any] = r.json()
    assert answer["field"].startswith(field), answer
    assert dash_app.search().total == 0
