"""``conveyor quiet``, ``stop``, ``clear``, ``history``, ``run-now`` and ``bulk`` on every
backend: the same audited actions as the dashboard's pages and API."""

from __future__ import annotations

from conveyor import Conveyor, JobState
from conveyor.worker import control
from conveyor.worker.presence import COLLECTION
from tests.support.hostile import TERMINAL_RAW, TERMINAL_TEXT, store_unvalidated

from .conftest import run, run_json


def fake_worker(app: Conveyor, worker_id: str, group: str | None = None) -> str:
    """A worker registry record (as a heartbeat writes it), optionally of a group of two."""
    doc = {"id": worker_id, "host": "h", "pid": 1, "queues": ["default"], "running": []}
    if group:
        doc |= {"group": group, "processes": 2}
    app.broker.docs.put(COLLECTION, worker_id, {**doc, "heartbeat_at": app.now()}, app.now(), 60)
    return worker_id


def test_quiet_and_stop(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    one = fake_worker(app, "h:2:a", group="h:1:9")
    fake_worker(app, "h:3:b", group="h:1:9")
    out = run_json("quiet", one, "--process", "--app", target)
    assert out == {"worker": one, "command": "quiet", "scope": "process"}
    assert control.read(app.broker, one, app.now()) == "quiet"
    text = run("stop", one, "--app", target)
    assert text.exit_code == 0 and "all its processes" in text.output
    assert control.read(app.broker, control.group_key("h:1:9"), app.now()) == "stop"
    assert app.broker.log_read("audit")[0]["actor"].startswith("cli:")
    missing = run("stop", "nobody", "--app", target)
    assert missing.exit_code == 2 and "no live worker" in missing.output


def test_clear_asks_then_deletes(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    for _ in range(2):
        app.enqueue("add", [1, 2], queue="mail")
    no = run("clear", "mail", "--app", target, input="n\n")
    assert no.exit_code == 1 and "Delete 2 waiting jobs" in no.output
    assert app.broker.counts()["mail"]["pending"] == 2
    assert run("clear", "mail", "--app", target, "--json").exit_code != 0, "--json needs --yes"
    assert run_json("clear", "mail", "--yes", "--app", target) == {"queue": "mail", "deleted": 2}
    assert run("clear", "nosuch", "--yes", "--app", target).exit_code == 2


def test_history(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    app.enqueue("add", [1, 2])
    app.enqueue("boom")
    app.worker().run_until_idle()
    out = run_json("history", "--app", target)
    assert (out["processed"], out["failed"], out["range"]) == (2, 1, "1h")
    text = run("history", "--range", "7d", "--app", target)
    assert text.exit_code == 0 and "Total: 2 processed, 1 failed" in text.output
    assert run("history", "--range", "1y", "--app", target).exit_code == 2


def test_run_now_and_bulk(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    later = app.enqueue("add", [1, 2], delay=3600)
    out = run_json("run-now", later.id, "--app", target)
    assert out == {"done": [later.id], "refused": []}
    assert later.refresh().state is JobState.PENDING
    assert run("run-now", later.id, "--app", target).exit_code == 1, "already due"
    out = run_json("bulk", "cancel", "--queue", "default", "--app", target)
    assert (out["matched"], out["done"]) == (1, 1)
    out = run_json("bulk", "delete", later.id, "--app", target)
    assert out["done"] == 1 and app.broker.get(later.id) is None
    assert run("bulk", "retry", "--app", target).exit_code == 2, "ids or filters"
    assert run("bulk", "explode", "x", "--app", target).exit_code == 2


def test_run_now_refusal_shows_hostile_ids_literally(cli_app: tuple[Conveyor, str]) -> None:
    """The refusal message listed the refused ids raw: an id stored by an older version or
    another language's producer wrote escapes, bidi overrides and NUL to the terminal."""
    app, target = cli_app
    no_nul = "Postgres" in type(app.broker).__name__  # text columns cannot hold NUL
    ids = [
        store_unvalidated(app, f"id-{name}-{text}", "add", 1, 2)  # due now: refused
        for name, text in TERMINAL_TEXT.items()
        if name != "huge" and not (no_nul and "\x00" in text)
    ]
    result = run("run-now", *ids, "--app", target)
    assert result.exit_code == 1 and "not scheduled or retrying" in result.output
    for raw in TERMINAL_RAW:
        assert raw not in result.output, repr(raw)
    assert "id-close_tag-a[/]b" in result.output


def test_bulk_takes_id_prefixes_like_every_other_command(cli_app: tuple[Conveyor, str]) -> None:
    """``bulk`` passed the typed ids through unresolved: a unique prefix (accepted by cancel,
    retry, run-now, dlq) matched nothing and the command said "0 of 1 jobs changed", exit 0."""
    app, target = cli_app
    later = app.enqueue("add", [1, 2], delay=3600)
    out = run_json("bulk", "run_now", later.id[:20], "--app", target)
    assert (out["matched"], out["done"]) == (1, 1)
    assert later.refresh().state is JobState.PENDING
    missing = run("bulk", "cancel", "nosuchjob", "--app", target)
    assert missing.exit_code == 1 and "not found" in missing.output
    assert later.refresh().state is JobState.PENDING
