"""The CLI on a sharded queue (issue 18): one logical row, per-shard depth, pause/resume all."""

from __future__ import annotations

from conveyor import Conveyor

from .conftest import run, run_json


def test_queues_status_pause_resume_on_a_sharded_queue(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    app.queue("events", shards=3)
    names = app.runtime.shards.get("events").names  # type: ignore[union-attr]
    for i in range(5):
        app.enqueue("add", (i, i), queue="events")
    rows = run_json("queues", "--app", target)["queues"]
    [row] = [r for r in rows if r["name"] == "events"]
    assert row["depth"] == 5 and [s["name"] for s in row["shards"]] == list(names)
    assert not [r for r in rows if r["name"] in names], "shards fold into the logical row"
    text = run("queues", "--app", target).output
    assert "Shards" in text and all(name in text for name in names)
    status = run("status", "--app", target).output
    assert "Shards" in status and names[0] in status
    assert run_json("pause", "events", "--app", target)["paused"] is True
    assert set(names) <= app.broker.paused_queues()
    rows = run_json("queues", "--app", target)["queues"]
    assert [r["paused"] for r in rows if r["name"] == "events"] == [True]
    result = run("resume", "events", "--app", target)
    assert result.exit_code == 0 and "resumed" in result.output
    assert not set(names) & app.broker.paused_queues()
    assert app.worker(queues="events").run_until_idle() == 5
