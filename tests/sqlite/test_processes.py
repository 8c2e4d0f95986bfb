"""Real processes on one SQLite file: 4 workers and 2 producers run every job exactly once;
kill -9 of a worker gives its leased jobs back after the lease expires; kill -9 of a producer
inside ``enqueue_many`` stores all of the batch or none of it."""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState
from conveyor.broker.sqlite import SqliteBroker
from conveyor.task import JobSpec

from .conftest import Spawn, finish, wait_for_line, wait_until

pytestmark = pytest.mark.slow

WORKER = """
    import os, sys
    from conveyor import Conveyor
    db, log, stop = sys.argv[1:4]
    app = Conveyor(f"sqlite:///{db}")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @app.task(name="record")
    def record(n: int) -> None:
        os.write(fd, f"{n} {os.getpid()}\\n".encode())  # one write(2) with O_APPEND: atomic

    worker = app.worker(queues=["default"], heartbeat=False, handle_signals=False)
    print("ready", flush=True)
    while True:
        stopping = os.path.exists(stop)  # looked at BEFORE draining: nothing can be missed
        ran = worker.run_until_idle()
        if stopping and ran == 0:
            break
        if ran == 0:
            app.broker.wait_for_work(["default"], 0.2)
    print("done", flush=True)
"""

PRODUCER = """
    import sys
    from conveyor import Conveyor
    from conveyor.task import JobSpec
    db, base, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    app = Conveyor(f"sqlite:///{db}")
    n = base
    while n < base + count:
        if n % 7 == 0:  # a mix of single enqueues and atomic batches
            app.enqueue("record", args=[n])
            n += 1
        else:
            size = min(40, base + count - n)
            app.enqueue_many([JobSpec("record", (i,), {}, {}) for i in range(n, n + size)])
            n += size
    print("produced", flush=True)
"""


def test_four_workers_and_two_producers_run_every_job_once(
    tmp_path: Path, db_path: str, spawn: Spawn
) -> None:
    log, stop = tmp_path / "executions.log", tmp_path / "stop"
    workers = [
        spawn(f"worker{i}", WORKER, db_path, str(log), str(stop)) for i in range(4)
    ]  # they create the new file concurrently
    for proc in workers:
        wait_for_line(proc, "ready")
    per_producer = 1500
    producers = [
        spawn(f"producer{i}", PRODUCER, db_path, str(i * 100_000), str(per_producer))
        for i in range(2)
    ]
    for proc in producers:
        assert "produced" in finish(proc, 120)
    stop.touch()
    for proc in workers:
        assert "done" in finish(proc, 120)

    lines = log.read_text().splitlines()
    runs = Counter(int(line.split()[0]) for line in lines)
    expected = {i * 100_000 + k for i in range(2) for k in range(per_producer)}
    assert set(runs) == expected, "every job ran"
    broker = SqliteBroker(db_path)
    twice = [n for n, times in runs.items() if times > 1]
    assert not twice, f"ran twice without a lease expiry: {twice[:10]}"
    assert len({line.split()[1] for line in lines}) > 1, "the workers shared the load"
    counts = broker.counts()["default"]
    assert counts["completed"] == len(expected)
    assert counts["pending"] == counts["active"] == counts["dead_letter"] == 0
    assert broker._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    broker.close()


BLOCKING_WORKER = """
    import os, sys, time
    from conveyor import Conveyor
    app = Conveyor(f"sqlite:///{sys.argv[1]}")

    @app.task(name="block")
    def block(n: int) -> None:
        os.write(1, f"running {n}\\n".encode())  # one write: 4 threads' lines never interleave
        time.sleep(600)

    app.worker(queues=["default"], concurrency=4, visibility_timeout=float(sys.argv[2]),
               heartbeat=False, handle_signals=False).run()
"""


def test_kill_9_of_a_worker_gives_its_jobs_back_after_the_lease(db_path: str, spawn: Spawn) -> None:
    app = Conveyor(SqliteBroker(db_path), rng=random.Random(1))
    jobs = [app.enqueue("block", args=[n]) for n in range(6)]
    vt = 1.5
    proc = spawn("blocking", BLOCKING_WORKER, db_path, str(vt))
    wait_for_line(proc, "running", count=4)
    wait_until(lambda: app.broker.counts()["default"]["active"] == 4, 30, "4 leased jobs")
    held = {j.id for j in jobs if j.refresh().state is JobState.ACTIVE}
    latest_deadline = max(app.get_job(i).lease_expires_at or 0 for i in held)
    proc.kill()  # SIGKILL: no drain, no release; the leases stay in the file
    proc.wait(30)
    assert app.broker.counts()["default"]["active"] == 4, "nothing gives them back but expiry"

    reaped: list[int] = []

    def all_reaped() -> bool:
        reaped.append(app.broker.reap_expired(time.time()))
        return sum(reaped) == 4

    wait_until(all_reaped, 30 + 2 * vt, "the reaper to return the 4 expired leases")
    assert time.time() >= latest_deadline - 1e-3, "not before the (last extended) deadline"
    for job_id in held:
        snap = app.get_job(job_id)
        assert snap.state is JobState.PENDING and snap.lost == 1 and snap.attempts == 1
        assert snap.errors[-1]["kind"] == "worker_lost"

    ran: list[int] = []

    def block(n: int) -> None:
        ran.append(n)

    app.task(block, name="block")

    assert app.worker(heartbeat=False, handle_signals=False).run_until_idle() == 6
    assert sorted(ran) == list(range(6))
    assert {app.get_job(i).attempts for i in held} == {2}
    app.close()


KILLED_PRODUCER = """
    import sys, time
    from conveyor import Conveyor
    from conveyor.broker.sqlite import SqliteBroker
    from conveyor.task import JobSpec
    db, where, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    app = Conveyor(f"sqlite:///{db}")
    conn = app.broker._conn()
    base = conn.total_changes

    def freeze() -> None:
        print("inside the transaction", flush=True)
        time.sleep(600)

    if where == "insert":  # stop deep inside the bulk INSERT (rows written, no COMMIT)
        def progress() -> int:
            if conn.in_transaction and conn.total_changes - base > count // 2:
                freeze()
            return 0
        conn.set_progress_handler(progress, 1000)
    elif where == "commit":  # stop after every row, count and event is written, before COMMIT
        original = SqliteBroker._before_commit
        def before_commit(self, tx):
            original(self, tx)
            freeze()
        SqliteBroker._before_commit = before_commit
    app.enqueue_many([JobSpec("record", (n,), {}, {}) for n in range(count)])
    print("committed", flush=True)
"""


@pytest.mark.parametrize("where", ["insert", "commit"])
def test_kill_9_of_a_producer_inside_enqueue_many_stores_none(
    db_path: str, where: str, spawn: Spawn
) -> None:
    broker = SqliteBroker(db_path)
    count = 8000
    proc = spawn(f"producer-{where}", KILLED_PRODUCER, db_path, where, str(count))
    wait_for_line(proc, "inside the transaction", 120)
    assert os.path.getsize(db_path + "-wal") > 0
    proc.kill()
    proc.wait(30)

    assert broker.counts() == {}, "none of the batch"
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert broker.events_read(None, 10)[0] == []
    # the dead process's lock is gone: others write at once, and a whole batch commits
    app = Conveyor(broker, rng=random.Random(3))
    assert len(app.enqueue_many([JobSpec("record", (n,), {}, {}) for n in range(10)])) == 10
    survivor = spawn("producer-ok", KILLED_PRODUCER, db_path, "none", str(count))
    assert "committed" in finish(survivor, 120)
    assert broker.counts()["default"]["pending"] == count + 10, "all of the batch"
    broker.close()
