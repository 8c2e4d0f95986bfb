"""Host header check (DNS rebinding), credential sanity, logout and the login limit's address.

Hostile hosts come from ``tests/support/hostile.py``; every route of the app (pages, API,
static files, login, the CSRF endpoint) must refuse them before doing anything.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.dashboard import DashboardConfig, create_app
from conveyor.dashboard.security import SESSION_COOKIE
from conveyor.errors import ValidationError
from tests.support.hostile import FOREIGN_HOSTS

from .conftest import AUTH, PASSWORD, TOKEN, USER, csrf_of, make_client

SAMPLE = {"name": "default", "id": "x", "key": "k"}


def every_route(client: TestClient) -> list[tuple[str, str]]:
    """Every (method, path) the app serves, with sample path parameters, static files included."""
    out = [("GET", "/static/app.css"), ("GET", "/static/htmx.min.js")]
    for route in client.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Mount) or not isinstance(route, Route) or not route.methods:
            continue
        path = re.sub(r"{(\w+)(:\w+)?}", lambda m: SAMPLE[m.group(1)], route.path)
        out += [(method, path) for method in sorted(route.methods - {"HEAD"})]
    return out


@pytest.mark.parametrize("auth", [True, False], ids=["auth", "open"])
def test_every_route_refuses_a_foreign_host(dash_app: Conveyor, auth: bool) -> None:
    settings: dict[str, Any] = {} if auth else {"token": None, "username": None, "password": None}
    with make_client(dash_app, **settings) as client:
        routes = every_route(client)
        assert {"/login", "/api/v1/csrf", "/static/app.css", "/api/v1/jobs", "/"} <= {
            p for _, p in routes
        }
        for host in FOREIGN_HOSTS:
            origin = {"Origin": f"http://{host}"}
            for method, path in routes:
                headers = {"host": host, **origin, **(AUTH if auth else {})}
                r = client.request(method, path, headers=headers)
                assert r.status_code in (400, 421), (host, method, path, r.status_code)
                assert "set-cookie" not in r.headers, (host, path)
        assert dash_app.broker.paused_queues() == set()
        assert dash_app.broker.log_read("audit") == []


def test_loopback_names_and_configured_hosts_are_allowed(dash_app: Conveyor) -> None:
    with make_client(dash_app) as client:
        for host in ("127.0.0.1", "127.0.0.1:8000", "localhost", "localhost:8000", "[::1]:8000"):
            assert client.get("/healthz", headers={"host": host}).status_code == 200, host
            assert client.get("/api/v1/workers", headers={"host": host, **AUTH}).status_code == 200
        assert client.get("/healthz", headers={"host": "dash.example.com"}).status_code == 400
    cfg = DashboardConfig(token=TOKEN, allowed_hosts=("dash.example.com", "*.internal.example"))
    with TestClient(create_app(dash_app, cfg), base_url="http://dash.example.com") as client:
        assert client.get("/api/v1/workers", headers=AUTH).status_code == 200
        for host in ("dash.example.com:443", "a.internal.example", "127.0.0.1:9"):
            assert client.get("/healthz", headers={"host": host}).status_code == 200, host
        assert client.get("/healthz", headers={"host": "internal.example.evil"}).status_code == 400


def test_a_private_bind_allows_only_its_own_address(dash_app: Conveyor) -> None:
    cfg = DashboardConfig(token=TOKEN)
    with TestClient(create_app(dash_app, cfg, host="10.1.2.3"), base_url="http://10.1.2.3") as c:
        assert c.get("/api/v1/workers", headers=AUTH).status_code == 200
        assert c.get("/healthz", headers={"host": "10.1.2.3:8080"}).status_code == 200
        for host in ("127.0.0.1", "localhost", *FOREIGN_HOSTS):
            assert c.get("/healthz", headers={"host": host}).status_code == 400, host


def test_allowed_hosts_from_the_environment() -> None:
    env = {"CONVEYOR_DASHBOARD_ALLOWED_HOSTS": "a.example, b.example:8000 ,"}
    assert DashboardConfig.from_env(env).allowed_hosts == ("a.example", "b.example")
    env = {"CONVEYOR_DASHBOARD_FORWARDED_ALLOW_IPS": "10.0.0.1,10.0.0.2"}
    assert DashboardConfig.from_env(env).forwarded_allow_ips == ("10.0.0.1", "10.0.0.2")
    with pytest.raises(ValidationError, match="allowed_hosts"):
        DashboardConfig(allowed_hosts=("bad host/",))


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"token": " " * 20}, "token"),
        ({"token": "\t\n" * 10}, "token"),
        ({"token": "  " + "t" * 15}, "token"),
        ({"password": " " * 12}, "password"),
        ({"username": "   ", "password": "long enough pass"}, "username"),
    ],
)
def test_whitespace_only_credentials_are_refused(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        DashboardConfig(**settings)
    assert info.value.field == field


@pytest.mark.parametrize("var", ["TOKEN", "PASSWORD", "USERNAME"])
def test_whitespace_only_credentials_in_the_environment_name_the_variable(var: str) -> None:
    env = {"CONVEYOR_DASHBOARD_PASSWORD": "long enough pass", f"CONVEYOR_DASHBOARD_{var}": " " * 20}
    with pytest.raises(ValidationError) as info:
        DashboardConfig.from_env(env)
    assert info.value.field == f"CONVEYOR_DASHBOARD_{var}"


def login_cookie(client: TestClient) -> tuple[str, str]:
    """Log in through the form; the session cookie and the CSRF token."""
    token = csrf_of(client.get("/login").text)
    r = client.post(
        "/login",
        data={"username": USER, "password": PASSWORD, "csrf_token": token},
        follow_redirects=False,
    )
    assert r.status_code == 303
    return client.cookies[SESSION_COOKIE], token


def test_a_logged_out_session_cookie_is_refused(dash_app: Conveyor) -> None:
    with make_client(dash_app) as client:
        cookie, token = login_cookie(client)
        assert client.get("/", follow_redirects=False).status_code == 200
        out = client.post("/logout", data={"csrf_token": token}, follow_redirects=False)
        assert out.status_code == 303
        client.cookies.set(SESSION_COOKIE, cookie)  # replay the cookie saved before logout
        assert client.get("/", follow_redirects=False).status_code == 303
        assert client.get("/api/v1/workers").status_code == 401


def test_logout_reaches_every_dashboard_of_the_broker(dash_app: Conveyor) -> None:
    cfg = DashboardConfig(username=USER, password=PASSWORD, secret=b"s" * 32)
    one = TestClient(create_app(dash_app, cfg), base_url="http://127.0.0.1")
    two = TestClient(create_app(dash_app, cfg), base_url="http://127.0.0.1")
    cookie, token = login_cookie(one)
    two.cookies.set(SESSION_COOKIE, cookie)
    assert two.get("/", follow_redirects=False).status_code == 200
    one.post("/logout", data={"csrf_token": token}, follow_redirects=False)
    assert two.get("/", follow_redirects=False).status_code == 303


def run_cli(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str) -> Any:
    from click.testing import CliRunner

    from conveyor.cli.main import cli

    for var in ("TOKEN", "USERNAME", "PASSWORD", "ALLOWED_HOSTS", "FORWARDED_ALLOW_IPS"):
        monkeypatch.delenv(f"CONVEYOR_DASHBOARD_{var}", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return CliRunner().invoke(cli, ["dashboard", "--url", "memory://", *args])


def test_the_command_line_refuses_blank_credentials_and_bad_hosts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blank = run_cli(monkeypatch, {"CONVEYOR_DASHBOARD_TOKEN": "    "})
    assert blank.exit_code == 2 and "CONVEYOR_DASHBOARD_TOKEN" in blank.output
    token = {"CONVEYOR_DASHBOARD_TOKEN": TOKEN}
    wildcard = run_cli(monkeypatch, token, "--host", "0.0.0.0")
    assert wildcard.exit_code == 2 and "--allowed-host" in wildcard.output
    bad = run_cli(monkeypatch, token, "--allowed-host", "evil/host")
    assert bad.exit_code == 2 and "allowed_hosts" in bad.output
    proxies = run_cli(monkeypatch, token, "--forwarded-allow-ips", "10.0.0.1,not-an-ip")
    assert proxies.exit_code == 2 and "forwarded_allow_ips" in proxies.output
