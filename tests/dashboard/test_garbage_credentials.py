"""Garbage where a secret is compared: a CSRF token or a session cookie signature holding
non-ASCII characters made ``hmac.compare_digest`` raise TypeError — a 500 for anyone who sends
one, logged in or not. Each is now simply not valid: 403 / the log-in page, never a 500."""

from __future__ import annotations

from starlette.testclient import TestClient

from conveyor import Conveyor

from .conftest import PASSWORD, USER, csrf_of, make_client


def test_non_ascii_tokens_and_cookies_are_refused_not_500(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, _ = browser_client
    r = client.post("/queues/default/pause", data={"csrf_token": "é" * 40})
    assert r.status_code == 403, r.status_code
    r = client.post("/queues/default/pause", headers={"X-CSRF-Token": b"\xff" * 40})  # type: ignore[dict-item]
    assert r.status_code == 403, r.status_code
    assert dash_app.broker.paused_queues() == set()
    with make_client(dash_app) as anon:
        for value in ("é.é", "eyJ1Ijoi.\u00ff\u00fe", "a." + "é" * 43):
            r = anon.get(
                "/",
                headers={"cookie": f"conveyor_session={value}".encode()},
                follow_redirects=False,
            )  # type: ignore[dict-item]
            assert r.status_code == 303 and "/login" in r.headers["location"], (
                value,
                r.status_code,
            )
        page = anon.get("/login")
        r = anon.post(
            "/login",
            data={"username": USER, "password": PASSWORD, "csrf_token": "é" * 40},
            follow_redirects=False,
        )
        assert r.status_code == 403, r.status_code
        r = anon.post(
            "/login",
            data={"username": USER, "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            follow_redirects=False,
        )
        assert r.status_code == 303
