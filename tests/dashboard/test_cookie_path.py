"""The dashboard's cookies are scoped to its mount path (item 5 of session 10's hardening).

Mounted at ``/admin/jobs`` inside a user's app, the session and CSRF cookies used to be set with
``Path=/``: the browser sent them to every page of the host app (and a second dashboard mounted
elsewhere on the same host shared, and overwrote, the same cookie names). They now carry
``Path=/admin/jobs``; a standalone dashboard keeps ``Path=/``. HTTP level, on every backend.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.dashboard import DashboardConfig, create_app
from conveyor.dashboard.security import SESSION_COOKIE

from .conftest import PASSWORD, TOKEN, USER, csrf_of
from .test_mount import PREFIX, parent_app

CONFIG = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD)


def _cookie(headers: list[tuple[str, str]], name: str) -> dict[str, str]:
    """The attributes of the ``Set-Cookie`` for ``name`` (lower-case keys; ``value`` too)."""
    for key, value in headers:
        if key.lower() == "set-cookie" and value.startswith(name + "="):
            first, *attrs = (part.strip() for part in value.split(";"))
            out = {"value": first.split("=", 1)[1]}
            for attr in attrs:
                k, _, v = attr.partition("=")
                out[k.lower()] = v
            return out
    raise AssertionError(f"no Set-Cookie for {name}: {headers}")


@pytest.fixture(params=["mounted", "standalone"])
def site(request: pytest.FixtureRequest, dash_app: Conveyor) -> Iterator[tuple[TestClient, str]]:
    mounted = request.param == "mounted"
    web = parent_app(dash_app, CONFIG) if mounted else create_app(dash_app, CONFIG)
    with TestClient(web, base_url="http://127.0.0.1") as client:  # type: ignore[arg-type]
        yield client, PREFIX if mounted else ""


def test_session_and_csrf_cookies_are_scoped_to_the_mount_path(
    site: tuple[TestClient, str],
) -> None:
    client, prefix = site
    path = prefix or "/"
    login = client.get(prefix + "/login")
    assert _cookie(login.headers.multi_items(), "conveyor_csrf")["path"] == path
    form = {"username": USER, "password": PASSWORD, "csrf_token": csrf_of(login.text)}
    r = client.post(prefix + "/login", data={**form, "next": prefix + "/"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    session = _cookie(r.headers.multi_items(), SESSION_COOKIE)
    assert session["path"] == path and "httponly" in session
    token = csrf_of(client.get(prefix + "/").text)
    r = client.post(prefix + "/logout", data={"csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303
    dropped = [
        _cookie([h], SESSION_COOKIE)
        for h in r.headers.multi_items()
        if h[1].startswith(SESSION_COOKIE + "=")
    ]
    assert path in {c["path"] for c in dropped}, dropped
    assert all(c.get("max-age") == "0" for c in dropped), dropped
