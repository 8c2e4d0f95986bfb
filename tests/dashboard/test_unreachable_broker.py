"""The dashboard over a broker that cannot be reached (a real Redis client on a closed port):
every page, fragment, API read and action answers 503 with ``Retry-After`` — never a 400
that blames the request, never a 500 — and the message never shows the broker password."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.dashboard import DashboardConfig, create_app
from tests.support import redis_proc
from tests.support.redis_proc import free_port

from .conftest import AUTH, TOKEN

#: Routes that never touch the broker (static answers, the API description, the CSRF token).
BROKER_FREE = {"/healthz", "/favicon.ico", "/api/v1/openapi.json", "/api/v1/csrf"}
#: A body every action accepts far enough to reach the broker.
BODIES = {
    "/api/v1/jobs": {"task": "add", "args": [1, 2]},
    "/api/v1/jobs/bulk": {"action": "retry", "ids": ["abc"]},
    "/api/limits": {"name": "rate:add", "value": "5/s"},
    "/limits/set": {"name": "rate:add", "value": "5/s"},
    "/limits/clear": {"name": "rate:add"},
    "/jobs/bulk": {"bulk": "selected:retry", "ids": ["abc"], "confirm": "yes"},
    "/queues/default/clear": {"confirm": "clear"},
}


@pytest.fixture
def down() -> Iterator[TestClient]:
    """A dashboard (bearer token) over a Redis URL nothing listens on."""
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0?socket_connect_timeout=2"
    app = Conveyor(url)
    web = create_app(app, DashboardConfig(token=TOKEN))
    with TestClient(web, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        client.headers.update(AUTH)
        yield client


def routes(client: TestClient) -> list[tuple[str, str]]:
    """Every (method, path) but the live streams, with sample path parameters."""
    out = []
    for route in client.app.routes:  # type: ignore[attr-defined]
        if not isinstance(route, Route) or route.path.startswith("/live/"):
            continue
        path = re.sub(
            r"{(\w+)(:\w+)?}", lambda m: {"name": "default"}.get(m.group(1), "x"), route.path
        )
        out += [(method, path) for method in sorted((route.methods or set()) - {"HEAD"})]
    return out


def test_every_route_answers_503_when_the_broker_is_down(down: TestClient) -> None:
    seen = []
    for method, path in routes(down):
        if path in BROKER_FREE:
            continue
        form = path in BODIES and not path.startswith("/api/")
        body = BODIES.get(path, {})
        r = down.request(method, path, **({"data": body} if form else {"json": body}))
        seen.append((method, path, r.status_code))
        assert r.status_code == 503, (method, path, r.status_code, r.text[:300])
        assert int(r.headers["retry-after"]) >= 1, (method, path)
        assert "hunter2" not in r.text and "unavailable" in r.text, (method, path, r.text[:300])
        if path.startswith("/api/") or path == "/metrics":
            assert r.json()["error"].startswith("Redis is unavailable"), (method, path)
        else:
            assert r.text.rstrip().endswith("</html>"), (method, path)
    assert len(seen) >= 60


@pytest.mark.skipif(not redis_proc.available(), reason="redis-server not installed")
def test_a_refused_password_is_a_503_without_the_password(tmp_path: Path) -> None:
    """A real redis-server with ``--requirepass`` and a URL with the wrong password: the
    dashboard's configuration is wrong, not the request (was 400); no retry hint."""
    with redis_proc.RedisServer(tmp_path / "redis", password="right-pw-123") as server:
        app = Conveyor(server.url.replace("right-pw-123", "wrong-pw-456"))
        web = create_app(app, DashboardConfig(token=TOKEN))
        with TestClient(web, base_url="http://127.0.0.1") as client:
            client.headers.update(AUTH)
            for path in ("/", "/jobs", "/limits", "/api/v1/overview", "/api/limits"):
                r = client.get(path)
                assert r.status_code == 503, (path, r.status_code, r.text[:300])
                assert "retry-after" not in r.headers, path
                assert "refused the credentials" in r.text and "wrong-pw" not in r.text, path
