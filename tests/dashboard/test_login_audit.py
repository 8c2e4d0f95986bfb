"""A refused log-in is audited under the user name typed — which anyone can type, before any
authentication: 60 KB names, terminal escapes, bidi overrides and forged newlines went into the
audit log as typed. The name is now cleaned as every other actor is (``actor_name``: control
and format characters removed, at most 150 characters), on every backend."""

from __future__ import annotations

import re

from conveyor import Conveyor

from .conftest import make_client


def test_a_refused_login_audits_a_cleaned_bounded_name(dash_app: Conveyor) -> None:
    with make_client(dash_app) as client:
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', client.get("/login").text)
        assert token
        for name in ("\x1b[31mroot\u202e", "x\nforged: admin logged in", "a" * 60_000):
            r = client.post(
                "/login",
                data={"username": name, "password": "wrong-password", "csrf_token": token[1]},
            )
            assert r.status_code == 401
    actors = [e["actor"] for e in dash_app.broker.log_read("audit") if e["action"] == "login"]
    assert len(actors) == 3
    assert all(len(a) <= 150 and a.isprintable() for a in actors), [a[:40] for a in actors]
    assert "[31mroot" in actors and "xforged: admin logged in" in actors
