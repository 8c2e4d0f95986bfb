"""The dashboard mounted under a prefix of a real Starlette app (``Mount("/admin/jobs", ...)``):
every link, asset, live URL, form action and redirect stays under the prefix, and the auth rule
is the standalone server's (no credentials: loopback only)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.dashboard import DashboardConfig, create_app

from .conftest import AUTH, PASSWORD, TOKEN, USER, csrf_of

PREFIX = "/admin/jobs"
URL_ATTRS = re.compile(r'\b(href|src|action|hx-post|hx-get|sse-connect)="([^"]*)"')


def parent_app(app: Conveyor, config: DashboardConfig, host: str = "127.0.0.1") -> Starlette:
    """A user's Starlette app with its own route and the dashboard under ``PREFIX``."""
    dashboard = create_app(app, config, host=host)
    return Starlette(
        routes=[
            Route("/", lambda request: PlainTextResponse("the user's own app")),
            Mount(PREFIX, dashboard),
        ]
    )


def urls_of(html: str) -> list[str]:
    """Every URL-valued attribute of a page (entities decoded)."""
    return [m.group(2).replace("&amp;", "&") for m in URL_ATTRS.finditer(html)]


def assert_under_prefix(html: str, where: str) -> None:
    urls = [u for u in urls_of(html) if not u.startswith(("#", "http"))]
    assert urls, where
    outside = [u for u in urls if not (u == PREFIX or u.startswith(PREFIX + "/") or u == "")]
    assert not outside, (where, outside)


@pytest.fixture
def mounted(dash_app: Conveyor) -> Iterator[TestClient]:
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD)
    with TestClient(parent_app(dash_app, config), base_url="http://127.0.0.1") as client:
        yield client


def log_in(client: TestClient) -> str:
    r = client.get(PREFIX + "/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"{PREFIX}/login?next={PREFIX}/"
    login = client.get(r.headers["location"])
    assert login.status_code == 200
    assert_under_prefix(login.text, "login page")
    form = {"username": USER, "password": PASSWORD, "csrf_token": csrf_of(login.text)}
    r = client.post(PREFIX + "/login", data={**form, "next": PREFIX + "/"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == PREFIX + "/", r.text
    return csrf_of(client.get(PREFIX + "/").text)


def test_every_page_links_assets_and_live_urls_under_the_prefix(
    mounted: TestClient, dash_app: Conveyor
) -> None:
    assert mounted.get(PREFIX + "/static/app.css").headers["content-type"].startswith("text/css")
    log_in(mounted)
    job = dash_app.enqueue("add", [1, 2])
    dead = dash_app.enqueue("boom", [1])
    dash_app.worker().run_until_idle()
    dash_app.enqueue("add", [3, 4], delay=600)
    pages = ["/", "/jobs", f"/jobs/{job.id}", "/dead", "/schedules", "/alerts", "/audit"]
    pages += ["/queues/default", "/jobs?state=dead_letter"]
    for page in pages:
        r = mounted.get(PREFIX + page)
        assert r.status_code == 200, (page, r.status_code)
        assert_under_prefix(r.text, page)
    overview = mounted.get(PREFIX + "/").text
    assert f'sse-connect="{PREFIX}/live/overview"' in overview
    assert f'href="{PREFIX}/static/app.css"' in overview
    assert (
        f'sse-connect="{PREFIX}/live/job/{dead.id}"' in mounted.get(f"{PREFIX}/jobs/{dead.id}").text
    )
    icon = mounted.get("/admin/jobs/favicon.ico", follow_redirects=False)
    assert icon.headers["location"] == PREFIX + "/static/favicon.svg"
    assert mounted.get(PREFIX + "/static/htmx.min.js").status_code == 200
    assert mounted.get("/").text == "the user's own app"


def test_actions_and_redirects_stay_under_the_prefix(
    mounted: TestClient, dash_app: Conveyor
) -> None:
    token = log_in(mounted)
    dead = dash_app.enqueue("boom", [1])
    dash_app.worker().run_until_idle()
    here = f"{PREFIX}/dead?queue=default"
    r = mounted.post(
        f"{PREFIX}/jobs/{dead.id}/retry",
        headers={
            "X-CSRF-Token": token,
            "HX-Request": "true",
            "HX-Current-URL": f"http://127.0.0.1{here}",
        },
    )
    assert r.status_code == 204 and r.headers["HX-Redirect"].startswith(here + "&flash="), r.headers
    r = mounted.post(
        f"{PREFIX}/queues/default/pause", data={"csrf_token": token}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"].startswith(PREFIX + "/?flash=")
    assert dash_app.broker.paused_queues() == {"default"}
    r = mounted.post(f"{PREFIX}/logout", data={"csrf_token": token}, follow_redirects=False)
    assert r.headers["location"] == PREFIX + "/login"


def test_api_and_live_under_the_prefix(mounted: TestClient) -> None:
    r = mounted.get(PREFIX + "/api/v1/overview")
    assert r.status_code == 401 and r.json()["error"] == "authentication required"
    assert mounted.get(PREFIX + "/api/v1/overview", headers=AUTH).status_code == 200
    assert mounted.get(PREFIX + "/live/overview").status_code == 401, "JSON refusal, no redirect"
    assert mounted.get(PREFIX + "/healthz").text == "ok"
    spec = mounted.get(PREFIX + "/api/v1/openapi.json", headers=AUTH).json()
    assert f"{PREFIX}/api/v1/jobs" in spec["paths"]


@pytest.mark.parametrize("standalone", [False, True], ids=["mounted", "standalone"])
def test_without_credentials_only_loopback_is_served(dash_app: Conveyor, standalone: bool) -> None:
    config = DashboardConfig(allowed_hosts=("jobs.example.com",))
    web: Any = (
        create_app(dash_app, config, host="0.0.0.0")
        if standalone
        else parent_app(dash_app, config, host="0.0.0.0")
    )
    base = "" if standalone else PREFIX
    with TestClient(web, base_url="http://jobs.example.com") as client:
        for path in ("/", "/jobs", "/api/v1/overview"):
            r = client.get(base + path, follow_redirects=False)
            assert r.status_code == 403 and "loopback" in r.json()["error"], (path, r.status_code)
        assert client.get(base + "/healthz").status_code == 200
    with TestClient(web, base_url="http://127.0.0.1") as client:
        client.headers["host"] = "jobs.example.com"
        assert client.get(base + "/jobs").status_code == 200, "on loopback it runs open"


def test_external_auth_lets_the_mounting_app_decide(dash_app: Conveyor) -> None:
    config = DashboardConfig(allowed_hosts=("jobs.example.com",), external_auth=True)
    web = parent_app(dash_app, config, host="0.0.0.0")
    with TestClient(web, base_url="http://jobs.example.com") as client:
        assert client.get(PREFIX + "/jobs").status_code == 200


def test_an_external_next_is_refused(mounted: TestClient, dash_app: Conveyor) -> None:
    token = log_in(mounted)
    job = dash_app.enqueue("add", [1, 2], delay=600)
    h = {"X-CSRF-Token": token}
    for evil in (
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "/other-app/",
        "http://127.0.0.1.evil.example/admin/jobs/",
        "javascript:alert(1)",
    ):
        r = mounted.post(
            f"{PREFIX}/jobs/{job.id}/cancel",
            data={"next": evil},
            headers={**h, "referer": evil},
            follow_redirects=False,
        )
        assert r.status_code == 303, evil
        location = r.headers["location"]
        assert location.startswith(f"{PREFIX}/jobs/{job.id}?flash="), (evil, location)
        dash_app.broker.requeue(job.id, dash_app.now())
    r = mounted.post(
        f"{PREFIX}/jobs/{job.id}/cancel",
        data={"next": f"{PREFIX}/jobs?state=pending&page=2"},
        headers=h,
        follow_redirects=False,
    )
    assert r.headers["location"].startswith(f"{PREFIX}/jobs?state=pending&page=2&flash=")
    login = mounted.get(f"{PREFIX}/login?next=https://evil.example/")
    assert login.status_code in (200, 303)


def test_external_auth_audits_the_mounting_apps_user(dash_app: Conveyor) -> None:
    """Behind Starlette's AuthenticationMiddleware with ``external_auth=True``, actions are
    audited as ``request.user.display_name`` (was ``local``), control characters removed."""
    from starlette.authentication import (
        AuthCredentials,
        AuthenticationBackend,
        SimpleUser,
    )
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware

    from conveyor.monitoring.inspect import Inspector

    class Everyone(AuthenticationBackend):
        async def authenticate(self, conn: Any) -> tuple[AuthCredentials, SimpleUser]:
            return AuthCredentials(["authenticated"]), SimpleUser("ops\x1b[2J<b>ann</b>")

    dashboard = create_app(dash_app, DashboardConfig(external_auth=True))
    outer = Starlette(
        routes=[Mount(PREFIX, dashboard)],
        middleware=[Middleware(AuthenticationMiddleware, backend=Everyone())],
    )
    with TestClient(outer, base_url="http://127.0.0.1") as client:
        token = csrf_of_page(client.get(PREFIX + "/").text)
        r = client.post(
            f"{PREFIX}/queues/default/pause", data={"csrf_token": token}, follow_redirects=False
        )
        assert r.status_code == 303, r.text
        entry = Inspector(dash_app.runtime).audit_log()[0]
        assert (entry["action"], entry["actor"]) == ("queue.pause", "ops[2J<b>ann</b>")
        assert "<b>ann" not in client.get(PREFIX + "/audit").text


def csrf_of_page(html: str) -> str:
    """The CSRF token of a page without a log-out form (hx-headers)."""
    match = re.search(r'"X-CSRF-Token": "([0-9a-f]+)"', html)
    assert match, "no CSRF token"
    return match.group(1)


def test_an_external_user_name_that_cannot_be_stored_is_cleaned(dash_app: Conveyor) -> None:
    """A user name with a lone surrogate (a name decoded with ``surrogateescape``) made the
    audit write fail AFTER the action ran: 500 and no audit entry on SQLite, Redis and
    PostgreSQL. Surrogates and line / paragraph separators are dropped like control chars."""
    from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware

    from conveyor.monitoring.inspect import Inspector

    class Everyone(AuthenticationBackend):
        async def authenticate(self, conn: Any) -> tuple[AuthCredentials, SimpleUser]:
            return AuthCredentials(["authenticated"]), SimpleUser("ops\udcffann\u2028\u2029x")

    dashboard = create_app(dash_app, DashboardConfig(external_auth=True))
    outer = Starlette(
        routes=[Mount(PREFIX, dashboard)],
        middleware=[Middleware(AuthenticationMiddleware, backend=Everyone())],
    )
    with TestClient(outer, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        token = csrf_of_page(client.get(PREFIX + "/").text)
        r = client.post(f"{PREFIX}/api/v1/queues/default/pause", headers={"X-CSRF-Token": token})
        assert r.status_code == 200, r.text
        entry = Inspector(dash_app.runtime).audit_log()[0]
        assert (entry["action"], entry["actor"]) == ("queue.pause", "opsannx")
