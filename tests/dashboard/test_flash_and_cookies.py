"""Flash messages and cookies: what a crafted link or a plain-HTTP hop can do to the dashboard.

* ``?flash=`` used to print any text a link carried on top of any page ("Session expired: sign
  in again at https://evil.example"), as if the dashboard said it. A flash now shows only
  with the signature the dashboard put next to it after an action.
* The session and CSRF cookies are ``HttpOnly; SameSite=Strict`` and ``Secure`` over HTTPS
  (a trusted proxy's ``X-Forwarded-Proto`` counts), never ``Secure``-less there.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.broker.memory import MemoryBroker
from conveyor.dashboard import DashboardConfig, create_app
from conveyor.dashboard.server import BackgroundServer

from .conftest import PASSWORD, TOKEN, USER, csrf_of

FORGED = "Session expired: sign in again at https://evil.example/login"


def test_a_flash_from_a_crafted_link_is_not_shown(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    for path in ("/", "/jobs", "/dead", "/queues", "/limits", "/jobs?state=pending"):
        joiner = "&" if "?" in path else "?"
        page = client.get(f"{path}{joiner}flash={quote(FORGED)}")
        assert page.status_code == 200, path
        assert "evil.example" not in page.text, path
        forged_sig = client.get(f"{path}{joiner}flash={quote(FORGED)}&fs=0123456789abcdef")
        assert "evil.example" not in forged_sig.text, path


def test_the_flash_of_an_action_is_still_shown(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    r = client.post("/queues/default/pause", data={"csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303
    page = client.get(r.headers["location"])
    assert 'class="flash"' in page.text and "paused" in page.text
    tampered = r.headers["location"].replace("paused", "deleted")
    assert 'class="flash"' not in client.get(tampered).text


def _login(client: TestClient, **headers: str) -> str:
    token = csrf_of(client.get("/login", headers=headers).text)
    r = client.post(
        "/login",
        data={"username": USER, "password": PASSWORD, "csrf_token": token},
        headers=headers,
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text[:300]
    return r.headers["set-cookie"]


def test_cookies_are_secure_over_https(dash_app: Conveyor) -> None:
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD)
    with TestClient(create_app(dash_app, config), base_url="https://127.0.0.1") as client:
        first = client.get("/login").headers["set-cookie"]
        assert "HttpOnly" in first and "Secure" in first and "SameSite=Strict" in first
        cookie = _login(client)
        assert "HttpOnly" in cookie and "Secure" in cookie and "samesite=strict" in cookie.lower()
    with TestClient(create_app(dash_app, config), base_url="http://127.0.0.1") as client:
        assert "Secure" not in _login(client)  # plain HTTP on loopback: a browser would drop it


def test_cookies_are_secure_behind_a_trusted_https_proxy() -> None:
    """A real uvicorn behind a proxy that terminates TLS (``X-Forwarded-Proto: https``)."""
    app = Conveyor(MemoryBroker())
    config = DashboardConfig(
        token=TOKEN, username=USER, password=PASSWORD, forwarded_allow_ips=("127.0.0.1",)
    )
    server = BackgroundServer(app, config=config).start()
    try:
        proxy = {"x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.9"}
        page = httpx.get(server.url + "/login", headers=proxy)
        seed = page.headers["set-cookie"]
        assert "Secure" in seed, seed
        r = httpx.post(
            server.url + "/login",
            data={"username": USER, "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            headers={**proxy, "cookie": seed.split(";")[0]},
        )
        assert r.status_code == 303, r.text[:300]
        assert "Secure" in r.headers["set-cookie"], r.headers["set-cookie"]
    finally:
        server.stop()
