"""``conveyor limits``: show, set and clear flow-control limits at run time (issue 15)."""

from __future__ import annotations

from typing import Any

from conveyor import ConcurrencyLimit, Conveyor

from .conftest import run, run_json


def test_limits_show_set_clear(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app

    @app.task(name="flow.sync", concurrency=ConcurrencyLimit(1, key="account_id"))
    def sync(account_id: int, n: int) -> None: ...

    for n in range(3):
        sync.enqueue(42, n)
    assert len(app.broker.claim(["default"], app.now(), limit=5)) == 1
    data: Any = run_json("limits", "show", "--app", target)
    assert data["declared"] == {"conc:flow.sync": "1 per account_id"}
    assert data["groups"][0]["waiting"] == 2
    assert "waiting for account_id=42 (1 running)" in data["groups"][0]["why"]
    result = run("limits", "set", "conc:flow.sync", "2", "--app", target)
    assert result.exit_code == 0, result.output
    assert app.limits()["limits"] == {"conc:flow.sync": [2.0]}
    assert len(app.broker.claim(["default"], app.now(), limit=5)) == 1
    text = run("limits", "show", "--app", target).output
    assert "conc:flow.sync" in text and "2 running" in text
    assert run("limits", "clear", "conc:flow.sync", "--app", target).exit_code == 0
    assert app.limits()["limits"] == {}
    bad = run("limits", "set", "partner", "10/s", "--app", target)
    assert bad.exit_code != 0 and "name" in bad.output


def test_status_and_job_say_why_a_job_waits(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app

    @app.task(name="flow.partner", rate_limit="1/m")
    def partner(i: int) -> None: ...

    jobs = [partner.enqueue(i) for i in range(3)]
    app.broker.claim(["default"], app.now(), limit=5)
    app.broker.claim(["default"], app.now(), limit=5)
    why = "throttled by rate limit flow.partner:1/m"
    assert why in run("status", "--app", target).output
    assert run_json("job", jobs[1].id, "--app", target)["waiting_for"] == why
    assert why in run("job", jobs[1].id, "--app", target).output
