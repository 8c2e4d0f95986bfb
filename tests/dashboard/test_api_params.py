"""Every query and path parameter of the API and the pages: garbage gets 422 naming the field."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor

V1 = "/api/v1"
CURSORS = ["garbage", "q@garbage", "default@1-x", "-5", "1" * 40, "1e9", "@", "\x00", "%ff"]

BAD_PARAMS = [
    ("/events", {"limit": "abc"}, "limit"),
    ("/events", {"limit": "0"}, "limit"),
    ("/events", {"limit": "10001"}, "limit"),
    ("/audit", {"limit": "-1"}, "limit"),
    ("/audit", {"limit": "1.5"}, "limit"),
    ("/overview", {"minutes": "x"}, "minutes"),
    ("/queues", {"minutes": "99999"}, "minutes"),
    ("/queues/default", {"minutes": "nan"}, "minutes"),
    ("/metrics", {"minutes": "0"}, "minutes"),
    ("/metrics", {"queue": "bad name"}, "queue"),
    ("/metrics", {"task": "bad name!"}, "task"),
    ("/metrics", {"queue": "q" * 600}, "queue"),
    ("/jobs", {"page": "x"}, "page"),
    ("/jobs", {"page": "0"}, "page"),
    ("/jobs", {"page_size": "501"}, "page_size"),
    ("/jobs", {"page_size": "1" * 5000}, "page_size"),
    ("/jobs", {"state": "bogus"}, "state"),
    ("/jobs", {"since": "yesterday"}, "since"),
    ("/jobs", {"until": "nan"}, "until"),
    ("/jobs", {"until": "inf"}, "until"),
    ("/jobs", {"queue": "bad name"}, "queue"),
    ("/jobs", {"task": "x" * 600}, "task"),
    ("/jobs", {"text": "x" * 600}, "text"),
    ("/jobs", {"id": "x" * 600}, "id"),
    ("/dead-letters", {"page": "-3"}, "page"),
    ("/dead-letters", {"since": "1e400"}, "since"),
    ("/dead-letters", {"queue": "a/b"}, "queue"),
    ("/queues/bad%20name", {}, "queue"),
    ("/queues/a%2Fb", {}, "queue"),
]


@pytest.mark.parametrize("after", CURSORS)
def test_events_cursor_garbage_is_422(api: TestClient, dash_app: Conveyor, after: str) -> None:
    dash_app.enqueue("add", [1, 2])
    r = api.get(f"{V1}/events", params={"after": after})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 422:
        assert r.json()["field"] == "after"
    else:  # a well-formed cursor that points nowhere reads nothing or everything, never 500
        assert isinstance(r.json()["events"], list)
    assert api.get(f"{V1}/events", params={"after": "garbage"}).status_code == 422


@pytest.mark.parametrize(("path", "params", "field"), BAD_PARAMS)
def test_bad_query_parameters_are_422(
    api: TestClient, path: str, params: dict[str, str], field: str
) -> None:
    r = api.get(V1 + path, params=params)
    assert r.status_code == 422, (path, params, r.status_code, r.text)
    assert r.json()["field"] == field


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/jobs?page=x", "page"),
        ("/jobs?state=bogus", "state"),
        ("/jobs?until=inf", "until"),
        ("/dead?page=0", "page"),
        ("/audit?limit=x", "limit"),
        ("/queues/default?minutes=x", "minutes"),
        ("/queues/bad%20name", "queue"),
    ],
)
def test_bad_page_parameters_are_422(api: TestClient, path: str, field: str) -> None:
    r = api.get(path)
    assert r.status_code == 422, (path, r.status_code)
    assert field in r.text
