"""``conveyor status``, ``jobs``, ``job`` and ``dlq list|requeue|purge`` on every backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.core.state import JobState
from conveyor.monitoring.rules import QueueDepth

from .conftest import run, run_json


def dead(app: Conveyor, n: int = 1, queue: str = "default") -> list[str]:
    ids = [app.enqueue("boom", [i], queue=queue).id for i in range(n)]
    app.worker([queue]).run_until_idle()
    return ids


def test_status(cli_app: tuple[Conveyor, str], clock: FakeClock) -> None:
    app, target = cli_app
    dead(app)
    app.enqueue("add", [1, 2])
    app.enqueue("add", [3, 4], queue="high")
    clock.advance(5)
    app.broker.doc_put(
        "workers",
        "w1",
        {
            "id": "w1",
            "queues": ["high"],
            "heartbeat_at": clock.now(),
            "running": [],
            "concurrency": 4,
        },
        clock.now(),
        ttl=30,
    )
    app.alerts.add_rule(QueueDepth(threshold=0))
    app.alerts.evaluate()
    data = run_json("status", "--app", target)
    queues = {q["name"]: q for q in data["queues"]}
    assert queues["default"]["depth"] == 1 and queues["default"]["dead_letters"] == 1
    assert queues["high"]["workers"] == 1 and queues["default"]["oldest_pending_age"] == 5.0
    assert data["workers"][0]["id"] == "w1"
    assert {a["key"] for a in data["alerts"]} == {"queue_depth:default", "queue_depth:high"}
    text = run("status", "--app", target)
    assert text.exit_code == 0
    for word in ("Queues", "default", "high", "Workers", "w1", "Alerts", "queue_depth:high"):
        assert word in text.output


def test_jobs_search(cli_app: tuple[Conveyor, str], clock: FakeClock) -> None:
    app, target = cli_app
    for i in range(5):
        app.enqueue("add", [i, 1000 + i])
        clock.advance(60)
    [bad] = dead(app)
    data = run_json("jobs", "--app", target, "--page-size", "2")
    assert data["total"] == 6 and data["pages"] == 3 and data["items"][0]["id"] == bad
    assert run_json("jobs", "--app", target, "--state", "dead_letter")["total"] == 1
    assert run_json("jobs", "--app", target, "--text", "1003")["total"] == 1
    assert run_json("jobs", "--app", target, "--since", "150s")["total"] == 3
    assert run_json("jobs", "--app", target, "--error", "kaput", "--task", "boom")["total"] == 1
    assert run_json("jobs", "--app", target, "--id", bad[:12], "--queue", "default")["total"] == 1
    out = run("jobs", "--app", target, "--state", "completed")
    assert out.exit_code == 0 and "5 total" in out.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "bogus"], "Invalid value for '--state'"),
        (["--since", "last tuesday"], "since"),
        (["--page", "0"], "--page"),
    ],
)
def test_jobs_bad_input(cli_app: tuple[Conveyor, str], args: list[str], message: str) -> None:
    _, target = cli_app
    result = run("jobs", "--app", target, *args)
    assert result.exit_code == 2 and message in result.output


def test_job_detail(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    [job_id] = dead(app)
    data = run_json("job", job_id, "--app", target)
    assert data["state"] == "dead_letter" and data["errors"][0]["message"] == "kaput"
    assert [t["event"] for t in data["timeline"]][-1] == "dead_lettered"
    out = run("job", job_id, "--app", target, "--tracebacks")
    assert out.exit_code == 0
    for word in ("dead_letter", "Errors", "kaput", "Timeline", "Traceback"):
        assert word in out.output
    missing = run("job", "nope", "--app", target)
    assert missing.exit_code == 1 and "job nope not found" in missing.output.replace("'", "")


def test_dlq_list_requeue_purge(cli_app: tuple[Conveyor, str], clock: FakeClock) -> None:
    app, target = cli_app
    ids = dead(app, 3)
    other = dead(app, 1, queue="emails")
    listed = run_json("dlq", "list", "--app", target)
    assert listed["total"] == 4 and listed["items"][0]["errors"]
    assert run_json("dlq", "list", "--app", target, "--queue", "emails")["total"] == 1
    assert "Dead letters" in run("dlq", "list", "--app", target).output
    assert run_json("dlq", "requeue", ids[0], "--app", target) == {"requeued": 1, "refused": []}
    refused = run("dlq", "requeue", ids[0], "--app", target)
    assert refused.exit_code == 1 and "not dead-lettered" in refused.output
    assert (
        run_json("dlq", "requeue", "--all", "--queue", "emails", "--app", target)["requeued"] == 1
    )
    assert app.get_job(other[0]).state == "pending"
    usage = run("dlq", "requeue", "--app", target)
    assert usage.exit_code == 2 and "give job ids" in usage.output
    assert run_json("dlq", "purge", "--id", ids[1], "--app", target) == {"purged": 1}
    clock.advance(3600)
    assert run_json("dlq", "purge", "--older-than", "2h", "--app", target) == {"purged": 0}
    aborted = run("dlq", "purge", "--app", target, input="n\n")
    assert aborted.exit_code == 1 and app.get_job(ids[2]).state == "dead_letter"
    done = run("dlq", "purge", "--older-than", "30m", "--app", target, input="y\n")
    assert done.exit_code == 0 and "Purged 1" in done.output
    bad = run("dlq", "purge", "--older-than", "soon", "--yes", "--app", target)
    assert bad.exit_code == 2 and "older-than" in bad.output
    actions = [e["action"] for e in app.broker.log_read("audit")]
    assert actions.count("dlq.delete") == 1 and "dlq.purge" in actions and "job.retry" in actions


def test_commands_have_help() -> None:
    for command in (
        ["status"],
        ["jobs"],
        ["job"],
        ["dlq"],
        ["dlq", "list"],
        ["dlq", "requeue"],
        ["dlq", "purge"],
    ):
        result = run(*command, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def test_url_option_opens_a_bare_app(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    missing = run("status", "--url", url)  # issue 20: a read command never creates a database
    assert missing.exit_code == 2 and "no SQLite database at" in missing.output
    assert not (tmp_path / "cli.db").exists()
    Conveyor(url).close()
    assert run_json("status", "--url", url) == {
        "now": pytest.approx(run_json("status", "--url", url)["now"], abs=60),
        "queues": [],
        "workers": [],
        "alerts": [],
        "totals": {s.value: 0 for s in JobState},  # every state, new ones included
    }
    bad = run("status", "--url", "nope://x")
    assert bad.exit_code == 2
