"""Fixtures for the monitoring and dashboard tests: an app with tasks, clients, credentials."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2; httpx works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from conveyor import Conveyor, PermanentError
from conveyor.dashboard import DashboardConfig, create_app

TOKEN = "test-token-0123456789abcdef"
USER, PASSWORD = "admin", "correct horse battery"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Silence the TestClient/httpx deprecation warning in every test of this directory."""
    for item in items:
        if "tests/dashboard" in str(item.fspath):
            item.add_marker(pytest.mark.filterwarnings("ignore:Using `httpx`"))


def register_tasks(app: Conveyor) -> None:
    """Tasks the dashboard tests use."""

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="boom", max_attempts=1)
    def boom(*args: Any, **kwargs: Any) -> None:
        raise PermanentError("it broke <b>badly</b>")

    @app.task(name="emails.send", queue="emails")
    def send(to: str) -> str:
        return f"sent to {to}"


@pytest.fixture
def dash_app(app: Conveyor) -> Conveyor:
    """The parametrised app (every backend) with the test tasks registered."""
    register_tasks(app)
    return app


def make_client(app: Conveyor, **config: Any) -> TestClient:
    """A TestClient over a dashboard with token + password auth (overridable)."""
    settings: dict[str, Any] = {"token": TOKEN, "username": USER, "password": PASSWORD}
    settings.update(config)
    return TestClient(create_app(app, DashboardConfig(**settings)), base_url="http://127.0.0.1")


@pytest.fixture
def api(dash_app: Conveyor) -> Iterator[TestClient]:
    """A client that authenticates every request with the bearer token."""
    with make_client(dash_app) as client:
        client.headers.update(AUTH)
        yield client


def csrf_of(html: str) -> str:
    """The CSRF token embedded in a page."""
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


@pytest.fixture
def browser_client(dash_app: Conveyor) -> Iterator[tuple[TestClient, str]]:
    """A client logged in through the form (session cookie) and its CSRF token."""
    with make_client(dash_app) as client:
        token = csrf_of(client.get("/login").text)
        response = client.post(
            "/login",
            data={"username": USER, "password": PASSWORD, "csrf_token": token, "next": "/"},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        yield client, csrf_of(client.get("/").text)
