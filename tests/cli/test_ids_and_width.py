"""Issue 20: full ids, id prefixes wherever an id is accepted, tables that fit 80 and 60 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock
from tests.support.hostile import store_unvalidated

from .conftest import run, run_json


def fits(output: str, width: int) -> None:
    """Every line within ``width`` and every table row closed by its right border (a table
    wider than the terminal is cut by the console: its right border disappears)."""
    for line in output.splitlines():
        assert len(line) <= width, line
        if line[:1] in "┏┃┡│└" and line:
            assert line.rstrip()[-1] in "┓┃┩│┘", line


def twins(app: Conveyor) -> tuple[str, str]:
    """Two dead letters whose ids share the prefix ``twin-``."""
    a = store_unvalidated(app, "twin-aaaa1", "boom", 1)
    b = store_unvalidated(app, "twin-bbbb2", "boom", 2)
    app.worker(["default"]).run_until_idle()
    return a, b


def test_prefix_resolves_on_every_backend(cli_app: tuple[Conveyor, str]) -> None:
    from conveyor.monitoring.lookup import AmbiguousJobId, resolve_job_id

    app, target = cli_app
    a, b = twins(app)
    assert resolve_job_id(app, "twin-a") == a and resolve_job_id(app, a) == a
    with pytest.raises(AmbiguousJobId) as err:
        resolve_job_id(app, "twin-")
    assert set(err.value.candidates) == {a, b} and err.value.total == 2
    assert run_json("job", "twin-a", "--app", target)["id"] == a
    ambiguous = run("job", "twin-", "--app", target)
    assert ambiguous.exit_code == 2 and a in ambiguous.output and b in ambiguous.output
    assert "matches 2 jobs" in ambiguous.output and "Traceback" not in ambiguous.output
    nothing = run("job", "zzz", "--app", target)
    assert nothing.exit_code == 1 and "job 'zzz' not found" in nothing.output
    assert run_json("dlq", "requeue", "twin-b", "--app", target) == {"requeued": 1, "refused": []}
    assert app.get_job(b).state == "pending"
    assert run_json("cancel", "twin-b", "--app", target) == {"done": [b], "refused": []}
    assert run_json("retry", "twin-b", "twin-a", "--app", target)["done"] == [b, a]
    assert run("retry", "twin-", "--app", target).exit_code == 2
    assert run("dlq", "purge", "--id", "twin-", "--yes", "--app", target).exit_code == 2


def test_ids_are_never_truncated(cli_app: tuple[Conveyor, str], clock: FakeClock) -> None:
    app, target = cli_app
    ids = [app.enqueue("add", [i, i]).id for i in range(3)]
    ids.append(app.enqueue("add", [1, 2], job_id="sched:two:1700000000000").id)
    for width in (80, 60):
        out = run("jobs", "--app", target, width=width).output
        for job_id in ids:
            assert job_id in out, (width, out)
        assert "…" not in out and "2\ufe0f" not in out
        fits(out, width)
        detail = run("job", ids[0][:8], "--app", target, width=width).output
        assert ids[0] in detail


@pytest.mark.parametrize("width", [80, 60])
def test_status_fits_narrow_terminals(
    cli_app: tuple[Conveyor, str], clock: FakeClock, width: int
) -> None:
    app, target = cli_app
    app.enqueue("add", [1, 2], queue="emails")
    app.broker.doc_put(
        "workers",
        "w1",
        {
            "id": "worker-host-12345-abcdef",
            "queues": ["emails"],
            "heartbeat_at": clock.now(),
            "running": [],
            "concurrency": 4,
        },
        clock.now(),
        ttl=30,
    )
    out = run("status", "--app", target, width=width).output
    assert "…" not in out, out  # headers wrap or their column is dropped, never 'que… pen…'
    assert "queue" in out and "pending" in out and "emails" in out
    assert "worker-host-12345-abcdef" in out
    fits(out, width)
    assert "not shown at" in out  # a note names the dropped columns


def test_columns_env_in_a_real_terminal_width(tmp_path: Path) -> None:
    """The installed command at COLUMNS=60 on a SQLite file (a separate process)."""
    url = f"sqlite:///{tmp_path}/w.db"
    app = Conveyor(url)
    job_id = app.enqueue("some.task", [1]).id
    app.close()
    env = {**os.environ, "COLUMNS": "60", "CONVEYOR_URL": url}
    env.pop("CONVEYOR_APP", None)
    for command in (["status"], ["jobs"], ["job", job_id[:10]]):
        out = subprocess.run(
            [sys.executable, "-m", "conveyor.cli.main", *command],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert job_id in out.stdout or command == ["status"]
        assert "…" not in out.stdout
        fits(out.stdout, 60)
