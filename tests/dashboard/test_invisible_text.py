"""Terminal and invisible characters in job data on every page, fragment and live stream.

HTML autoescaping stops markup, but not what the CLI already shows as escapes (issue 20):
bidirectional overrides (``\\u202e`` turns "exe.txt" around), escape sequences, NUL and BEL,
line separators. They reached pages raw — an operator saw a reordered task name or an id that
looked like another one. Now every value a template prints shows them as escapes (``\\u202e``)
on every backend, while newlines in tracebacks and indented JSON stay.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import quote

from starlette.testclient import TestClient

from conveyor import ConcurrencyLimit, Conveyor, PermanentError, chord, group
from conveyor.errors import ValidationError
from conveyor.task import JobSpec
from conveyor.worker.presence import COLLECTION
from tests.support.hostile import TERMINAL_RAW, TERMINAL_TEXT, store_unvalidated

ALL = " | ".join(v for k, v in TERMINAL_TEXT.items() if k != "huge")
#: What no page may carry raw (a browser turns \r into a line break and NUL into U+FFFD).
RAW = tuple(c for c in TERMINAL_RAW if c != "\u20e3")


def seed(app: Conveyor) -> dict[str, str]:
    """Hostile text in args, kwargs, metadata, errors, task names, ids, schedules and workers."""

    @app.task(name="invisible.fail", max_attempts=1)
    def fail(*args: Any, **kwargs: Any) -> None:
        raise PermanentError(ALL + "\nsecond line")

    now = app.now()
    ids = {
        "dead": fail.enqueue(ALL, why=ALL).id,
        "odd_id": store_unvalidated(app, "id-\u202eexe.txt\x1b[2J", "add", ALL, kwargs={"b": ALL}),
        "scheduled": app.enqueue("add", [ALL, 1], delay=600, metadata={"note": ALL}).id,
    }
    job = app.build_job(JobSpec("add", (ALL,), {}, {}), now)
    app.broker.enqueue([dataclasses.replace(job, id="task-evil", task="t\u202eevil\x07")], now)
    ids["task"] = "task-evil"
    app.worker(["default"]).run_until_idle()
    app.schedule_cron("rtl", "add", "0 3 * * *", args=[ALL])

    @app.task(
        name="invisible.keyed", concurrency=ConcurrencyLimit(1, key="account"), fair_by="account"
    )
    def keyed(account: str) -> None:
        """Waits in a flow group named after its (hostile) account."""

    account = "<b>acc</b>\u202eevil"
    try:
        keyed.enqueue(account)
    except ValidationError:  # bidi marks refused in keys: markup still reaches the page
        keyed.enqueue("<b>acc</b>evil")
    ids["keyed"] = keyed.enqueue("<b>acc</b>evil").id
    flow = chord(group([app.tasks["add"].partial(ALL, "x")]), app.tasks["add"].partial(ALL))
    ids["workflow"] = flow.enqueue(name="wf\u202eevil").ids[0]
    ids["wf"] = flow.enqueue(name="wf2").id
    app.queue("sharded", shards=3)
    ids["sharded"] = app.enqueue("add", [ALL, "s"], queue="sharded").id
    doc = {
        "id": "w-\u202eworker",
        "host": ALL,
        "pid": 7,
        "queues": ["default"],
        "concurrency": 1,
        "running": [],
        "jobs": [],
        "started_at": now,
        "state": "running",
        "heartbeat_at": now,
    }
    app.broker.docs.put(COLLECTION, doc["id"], doc, now, ttl=60)
    return ids


def pages(ids: dict[str, str]) -> list[str]:
    """Every page and fragment the seeded data shows up on."""
    out = ["/", "/jobs", "/dead", "/queues", "/queues/default", "/schedules", "/workers"]
    out += ["/audit", "/alerts", "/limits", "/history", "/fragments/workers"]
    out += ["/fragments/queues", "/jobs?state=scheduled", "/jobs?text=" + quote("evil")]
    out.append(f"/workflows/{quote(ids['wf'], safe='')}")
    out += ["/queues/sharded", "/jobs?queue=sharded", "/dead?text=" + quote("\u202e")]
    return out + [f"/jobs/{quote(i, safe='')}" for k, i in ids.items() if k != "wf"]


def check(html: str, where: str) -> None:
    """No raw invisible character outside form values (a checkbox posts the real id back)."""
    html = re.sub(r'value="[^"]*"', "", html)
    for raw in RAW:
        assert raw not in html, (where, repr(raw), html[max(0, html.find(raw) - 200) :][:400])


def test_no_page_carries_invisible_characters_raw(
    browser_client: tuple[TestClient, str], dash_app: Conveyor
) -> None:
    client, token = browser_client
    ids = seed(dash_app)
    client.post(f"/jobs/{quote(ids['odd_id'], safe='')}/cancel", data={"csrf_token": token})
    for path in pages(ids):
        r = client.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        check(r.text, path)
    detail = client.get(f"/jobs/{ids['dead']}").text
    assert "\\u202e" in detail and "\\x1b[2J" in detail  # shown, as the CLI shows them
    assert (
        re.search(r"ALL|second line", detail) and "\nsecond line" in detail
    )  # tracebacks keep lines
    assert "t\\u202eevil\\x07" in client.get("/jobs").text
