"""Another language can enqueue: a job written with nothing but redis-cli is run by a worker.

The shell script is the recipe of docs/wire-format.md ("Enqueue without Conveyor"), extracted
from the doc and run verbatim (so the doc and this test cannot drift); the job's state and
result are then read back with redis-cli as well.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.broker.redis import RedisBroker
from tests.support.redis_proc import REDIS_CLI

DOC = Path(__file__).parents[2] / "docs" / "wire-format.md"


def documented_recipe() -> str:
    """The first bash block of "Enqueue without Conveyor" in docs/wire-format.md, verbatim."""
    text = DOC.read_text()
    section = text[text.index("## 4. Enqueue without Conveyor") :]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match is not None, "docs/wire-format.md: the recipe's bash block is missing"
    return match.group(1)


RECIPE = documented_recipe()


def _sh(script: str, port: int, **env: str) -> str:
    full_env = {"PATH": "/usr/bin:/bin", "REDIS_CLI": REDIS_CLI, "PORT": str(port), **env}
    done = subprocess.run(
        ["bash", "-c", script], env=full_env, capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


def test_job_enqueued_with_redis_cli_only_is_run_by_a_worker(redis_server: Any) -> None:
    RedisBroker.from_url(redis_server.url).flush_all()
    _sh(RECIPE, redis_server.port, JOB_ID="from-shell-1")

    app = Conveyor(redis_server.url)

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    assert app.get_job("from-shell-1").state is JobState.PENDING
    assert app.worker(queues=["default"]).run_until_idle() == 1
    read = _sh(
        '$REDIS_CLI -h 127.0.0.1 -p $PORT HMGET "conveyor:{default}:job:from-shell-1" '
        "state attempts result",
        redis_server.port,
    )
    assert read.split() == ["completed", "1", "5"]
    job = app.get_job("from-shell-1")
    assert (job.state, job.result, job.task, job.args) == (JobState.COMPLETED, 5, "add", [2, 3])
    app.close()


def _now_stage() -> str:
    """The text processing the recipe applies to ``redis-cli TIME`` output (its NOW line)."""
    match = re.search(r"^NOW=\$\(\$R TIME \| (.*)\)$", RECIPE, re.M)
    assert match is not None, "the recipe must compute NOW from `$R TIME | ...`"
    return match.group(1)


@pytest.mark.parametrize(
    ("seconds", "micros", "expected"),
    [
        ("1700000329", "11536", "1700000329.011536"),  # the case: zero padding matters
        ("1700000329", "7", "1700000329.000007"),
        ("1700000329", "999999", "1700000329.999999"),
        ("1700000329", "0", "1700000329.000000"),
    ],
)
def test_the_recipe_turns_redis_time_into_exact_epoch_seconds(
    seconds: str, micros: str, expected: str
) -> None:
    out = _sh(f"printf '%s\\n%s\\n' {seconds} {micros} | {_now_stage()}", 0)
    assert out.strip() == expected


def test_recipe_timestamps_match_the_server_clock(redis_server: Any) -> None:
    """Run the documented recipe repeatedly: created_at lies between two TIME reads."""
    broker = RedisBroker.from_url(redis_server.url)
    broker.flush_all()
    client = broker.client
    for n in range(30):  # a TIME with < 100000 µs (10 % of them) exposed the old recipe
        before = client.time()
        _sh(RECIPE, redis_server.port, JOB_ID=f"clock-{n}")
        after = client.time()
        job = broker.get(f"clock-{n}")
        assert job is not None
        low, high = before[0] + before[1] / 1e6, after[0] + after[1] / 1e6
        assert low <= job.created_at <= high, (n, low, job.created_at, high)
    broker.close()
