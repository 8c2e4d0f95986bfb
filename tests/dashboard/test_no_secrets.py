"""No secret on any page, fragment or API answer: the broker URL's password (a real
redis-server with ``--requirepass``) and an alert webhook's secret path and credentials, with
alerts firing, jobs failing and the broker refusing a second app's wrong password."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from conveyor import Conveyor, PermanentError
from conveyor.dashboard import DashboardConfig, create_app
from conveyor.monitoring.alerts import WebhookNotifier
from conveyor.monitoring.rules import QueueDepth
from tests.support import redis_proc

from .conftest import AUTH, TOKEN

pytestmark = pytest.mark.skipif(not redis_proc.available(), reason="redis-server not installed")
PASSWORD = "brok3r-pw-Zq9"
HOOK = "https://hookuser:hookpass@hooks.example.com/services/T000/SECRETPATH42"
SECRETS = (PASSWORD, "hookpass", "SECRETPATH42", "T000")


def test_no_page_or_api_answer_holds_a_secret(tmp_path: Path) -> None:
    with redis_proc.RedisServer(tmp_path / "redis", password=PASSWORD) as server:
        app = Conveyor(server.url)

        @app.task(name="boom", max_attempts=1)
        def boom() -> None:
            raise PermanentError("the partner API said no")

        for _ in range(3):
            boom.enqueue()
        app.worker().run_until_idle()
        app.alerts.add_rule(QueueDepth(threshold=1))
        app.alerts.add_notifier(WebhookNotifier(HOOK, retries=0, timeout=0.2))
        app.enqueue("boom")
        app.alerts.evaluate()
        web = create_app(app, DashboardConfig(token=TOKEN))
        with TestClient(web, base_url="http://127.0.0.1") as client:
            client.headers.update(AUTH)
            paths = [
                re.sub(r"{(\w+)(:\w+)?}", "default", r.path)
                for r in web.routes
                if isinstance(r, Route) and "GET" in (r.methods or ()) and "/live/" not in r.path
            ]
            for path in paths:
                body = client.get(path).text
                leaked = [s for s in SECRETS if s in body]
                assert not leaked, (path, leaked)
            assert client.get("/api/v1/alerts").json(), "an alert is firing"
