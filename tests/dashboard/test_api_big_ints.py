"""An integer beyond 64 bits in an API enqueue body is a 422 naming ``body``, not an argument
silently turned into a float (orjson reads ``18446744073709551616`` as ``1.8446744073709552e+19``);
the CLI's side: ``tests/cli/test_json_big_ints.py``."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.dashboard.api import PREFIX as V1

BIG = ["18446744073709551616", "-9223372036854775809", "1" + "0" * 40]


@pytest.mark.parametrize("number", BIG)
def test_the_api_refuses_an_integer_beyond_64_bits(
    api: TestClient, dash_app: Conveyor, number: str
) -> None:
    body = f'{{"task": "add", "args": [1, {number}]}}'.encode()
    r = api.post(f"{V1}/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "body" and "64 bits" in r.json()["error"], r.json()
    assert dash_app.search().total == 0
