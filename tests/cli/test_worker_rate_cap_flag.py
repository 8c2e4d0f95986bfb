"""``conveyor worker --max-rate-limited N``: the CLI sets the worker's ``max_rate_limited``.

A job that always raises ``RateLimited(retry_after=0)`` is given back for free until the N-th
``RateLimited`` in a row, which spends its one attempt (docs/flow-control.md). Real worker
process, real SQLite file.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from click.testing import CliRunner

from conveyor import Conveyor, JobState
from conveyor.cli.main import cli
from tests.worker.conftest import wait_until
from tests.worker.harness import CONVEYOR, WorkerProcess

APP = """
import os
from conveyor import Conveyor
from conveyor.errors import RateLimited

app = Conveyor(os.environ["CONVEYOR_URL"])

@app.task(max_attempts=1)
def spin() -> None:
    with open(os.environ["SPIN_LOG"], "a") as out:
        out.write("run\\n")
    raise RateLimited(retry_after=0, reason="partner says 429")
"""


def test_the_flag_caps_the_rate_limited_runs_of_a_job(tmp_path: Path) -> None:
    (tmp_path / "rlapp.py").write_text(textwrap.dedent(APP))
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    runs = tmp_path / "runs.log"
    env = {
        "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "SPIN_LOG": str(runs),
        "CONVEYOR_URL": url,
    }
    app = Conveyor(url)
    job = app.enqueue("spin", queue="default")
    worker = WorkerProcess(
        url,
        tmp_path,
        env=env,
        command=[CONVEYOR, "worker", "rlapp:app", "--max-rate-limited", "3", "--no-supervisor"],
    )
    try:
        wait_until(lambda: job.refresh().state is JobState.DEAD_LETTER, timeout=30)
    finally:
        worker.close()
        app.close()
    assert runs.read_text().count("run") == 3  # 2 given back for free, the 3rd spent it


def test_the_flag_refuses_a_value_outside_its_range() -> None:
    result = CliRunner().invoke(cli, ["worker", "x:app", "--max-rate-limited", "50"])
    assert result.exit_code == 2
    assert "--max-rate-limited" in result.output
