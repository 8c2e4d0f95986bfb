"""Another language can enqueue: a job written with nothing but redis-cli is run by a worker.

The shell script below is the recipe of docs/wire-format.md ("Enqueue without Conveyor"),
run verbatim; the job's state and result are then read back with redis-cli as well.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from conveyor import Conveyor, JobState
from conveyor.broker.redis import RedisBroker
from tests.support.redis_proc import REDIS_CLI

RECIPE = r"""
set -eu
R="$REDIS_CLI -h 127.0.0.1 -p $PORT"
Q=default
ID=$JOB_ID
NOW=$($R TIME | paste -sd. -)
SEQ=$($R INCR "conveyor:{$Q}:seq")
RK=$(printf '%016x:%s' "$SEQ" "$ID")
F='{"v":1,"id":"%s","queue":"%s","state":"pending","task":"add","args":[2,3],'
F="$F"'"kwargs":{},"max_attempts":3,"created_at":%s,"run_at":%s}'
PAYLOAD=$(printf "$F" "$ID" "$Q" "$NOW" "$NOW")
$R SADD conveyor:queues "$Q" > /dev/null
$R > /dev/null <<EOF
MULTI
HSET "conveyor:{$Q}:payloads" $ID '$PAYLOAD'
HSET "conveyor:{$Q}:job:$ID" state pending priority 0 task add created_at $NOW run_at $NOW rk $RK
ZADD "conveyor:{$Q}:ready" 0 $RK
LPUSH "conveyor:{$Q}:wake" 1
EXEC
EOF
"""


def _sh(script: str, port: int, **env: str) -> str:
    full_env = {"PATH": "/usr/bin:/bin", "REDIS_CLI": REDIS_CLI, "PORT": str(port), **env}
    done = subprocess.run(["bash", "-c", script], env=full_env, capture_output=True, text=True,
                          timeout=30, check=True)  # fmt: skip
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
    read = _sh('$REDIS_CLI -h 127.0.0.1 -p $PORT HMGET "conveyor:{default}:job:from-shell-1" '
               "state attempts result", redis_server.port)  # fmt: skip
    assert read.split() == ["completed", "1", "5"]
    job = app.get_job("from-shell-1")
    assert (job.state, job.result, job.task, job.args) == (JobState.COMPLETED, 5, "add", [2, 3])
    app.close()


def test_the_recipe_is_the_documented_one() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "wire-format.md").read_text()
    for line in RECIPE.strip().splitlines():
        assert line.strip() in doc, f"docs/wire-format.md lacks recipe line: {line.strip()}"
