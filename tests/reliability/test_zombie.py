"""R3: a zombie worker. A worker process holding a job is frozen with SIGSTOP past its lease;
another worker process gets the job after the lease expires and completes it; then the zombie is
thawed with SIGCONT and finishes the handler too. Its completion must be refused (the fencing
token of its attempt is stale) and the job's stored result must stay the second worker's.

The second test does the same with the low-level consumer API (``app.dequeue``), where the
zombie's ``ack()`` itself must raise ``LeaseLost``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conveyor import JobState
from tests.reliability.conftest import StartWorkers
from tests.reliability.harness import Ledger, checker_app, wait_until
from tests.worker.harness import REPO

pytestmark = pytest.mark.slow

VT = "2"  # seconds of lease (the minimum the CLI takes is 1)


def test_r3_zombie_worker_completion_is_refused(
    redis_url: str, ledger: Ledger, start_workers: StartWorkers
) -> None:
    app = checker_app(redis_url)
    first = start_workers(redis_url, "-c", "1", "--visibility-timeout", VT)
    [zombie] = first.wait_ready(1)
    job = app.enqueue("work", args=[1, 3.0], job_id="job-1")
    wait_until(lambda: ledger.starts().get(1), 20, "the first worker to start the job")
    assert ledger.starts()[1][0].pid == zombie
    os.kill(zombie, signal.SIGSTOP)
    try:
        second = start_workers(redis_url, "-c", "1", "--visibility-timeout", VT)
        [rescuer] = second.wait_ready(1)
        # The lease expires (nobody extends it), the job is reaped and run again elsewhere.
        wait_until(lambda: job.refresh().state is JobState.COMPLETED, 30, "the second run")
        settled = app.get_job(job.id)
        assert settled.result == rescuer and f":{rescuer}:" in str(settled.worker_id)
        assert settled.attempts == 2 and settled.lost == 1
        assert [e["kind"] for e in settled.errors] == ["worker_lost"]
        assert [ln.pid for ln in ledger.starts()[1]] == [zombie, rescuer]
    finally:
        os.kill(zombie, signal.SIGCONT)
    # The zombie wakes up, finishes its handler ... and its outcome is refused.
    wait_until(
        lambda: any(ln.pid == zombie for ln in ledger.done().get(1, [])),
        20,
        "the zombie's handler to return",
    )
    wait_until(
        lambda: any(
            "job job-1 task=work" in line and "outcome=lease_lost" in line
            for line in first.output().splitlines()
        ),
        20,
        "the zombie to log its refused completion",
    )
    after = app.get_job(job.id)
    assert after.state is JobState.COMPLETED and after.result == rescuer
    assert (after.attempts, after.lost, after.finished_at) == (2, 1, settled.finished_at)
    assert after.worker_id == settled.worker_id
    # The zombie is a healthy worker again: both processes keep serving the queue.
    more = [app.enqueue("work", args=[n, 0.3], job_id=f"job-{n}") for n in range(2, 8)]
    wait_until(lambda: all(j.refresh().state is JobState.COMPLETED for j in more), 30, "more")
    for workers in (first, second):
        workers.signal(signal.SIGTERM)
        assert workers.wait(30) == 0, workers.output()[-3000:]
    app.close()


ZOMBIE_CONSUMER = """
    import sys
    from conveyor import Conveyor
    from conveyor.errors import LeaseLost

    app = Conveyor(sys.argv[1])
    delivery = app.dequeue("default", visibility_timeout=1.0)
    print("leased", delivery.id, delivery.token, flush=True)
    sys.stdin.readline()  # frozen here (SIGSTOP) while another worker takes over
    try:
        delivery.ack(result="zombie")
    except LeaseLost as exc:
        print("refused", type(exc).__name__, flush=True)
    else:
        print("accepted", flush=True)
"""


def test_r3_zombie_consumer_ack_is_refused(
    redis_url: str, ledger: Ledger, tmp_path: Path, start_workers: StartWorkers
) -> None:
    app = checker_app(redis_url)
    job = app.enqueue("work", args=[1, 0.05], job_id="job-1")
    script = tmp_path / "zombie_consumer.py"
    script.write_text(textwrap.dedent(ZOMBIE_CONSUMER))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, str(script), redis_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().split()[:2] == ["leased", "job-1"]
        os.kill(proc.pid, signal.SIGSTOP)
        workers = start_workers(redis_url, "-c", "1", "--visibility-timeout", VT)
        [rescuer] = workers.wait_ready(1)
        wait_until(lambda: job.refresh().state is JobState.COMPLETED, 30, "the second delivery")
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("ack now\n")
        proc.stdin.flush()
        assert proc.stdout.readline().split() == ["refused", "LeaseLost"]
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(10)
    final = app.get_job(job.id)
    assert final.state is JobState.COMPLETED and final.result == rescuer
    assert final.attempts == 2 and final.lost == 1
    assert [ln.pid for ln in ledger.starts()[1]] == [rescuer]
    workers.signal(signal.SIGTERM)
    assert workers.wait(30) == 0
    app.close()
