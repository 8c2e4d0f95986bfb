"""The auto-batching producer (issue 18) on a real SQLite file: load, bypasses, shutdown.

50 threads x 200 one-job calls share broker calls (counted by wrapping the real broker);
``connection=`` (transactional enqueue) bypasses the batcher; ``app.close()`` and the
interpreter's exit store what is still buffered.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from conveyor import AutoBatch, Conveyor
from conveyor.autobatch import AutoBatcher
from tests.support.autobatch_load import hammer, record_enqueue_sizes

DEADLINE = 30.0


def _count(app: Conveyor) -> int:
    return sum(sum(states.values()) for states in app.broker.counts().values())


def test_fifty_threads_of_single_enqueues_share_broker_calls(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'load.db'}", autobatch=AutoBatch(100, 0.001))
    sizes = record_enqueue_sizes(app.broker)
    ids = hammer(app, threads=50, per_thread=200)
    flat = [i for per in ids for i in per]
    assert len(flat) == 10_000 and len(set(flat)) == 10_000, "every caller got its own id"
    assert _count(app) == 10_000
    assert sum(sizes) == 10_000 and max(sizes) <= 100
    assert len(sizes) <= 2_500, f"{len(sizes)} broker calls for 10,000 jobs"
    order = {job.id: tuple(job.args) for job in app.peek("default", 10_000)}
    for k, per in enumerate(ids):
        assert [order[i] for i in per] == [(k, i) for i in range(200)]
    app.close()


def test_transactional_enqueue_bypasses_the_batcher(tmp_path: Path) -> None:
    path = tmp_path / "txn.db"
    app = Conveyor(f"sqlite:///{path}")
    batcher = AutoBatcher(app.runtime, AutoBatch(max_jobs=50, max_delay=1.0), timer=lambda: 0.0)
    app.runtime.producer.autobatch = batcher  # would hold a buffered call until 50 wait

    @app.task(name="ship")
    def ship(order: int) -> None: ...

    conn = sqlite3.connect(path, check_same_thread=False)
    handle = ship.options(connection=conn).enqueue(1)
    conn.commit()
    conn.close()
    assert app.get_job(handle.id).args == [1]
    assert batcher.writes == 0 and batcher.waiting == 0
    app.close()


def test_app_close_stores_what_is_buffered(tmp_path: Path) -> None:
    path = tmp_path / "close.db"
    app = Conveyor(f"sqlite:///{path}")
    batcher = AutoBatcher(app.runtime, AutoBatch(max_jobs=50, max_delay=1.0), timer=lambda: 0.0)
    app.runtime.producer.autobatch = batcher
    told: list[str] = []
    t = threading.Thread(target=lambda: told.append(app.enqueue("t", args=[1]).id), daemon=True)
    t.start()
    deadline = time.monotonic() + DEADLINE
    while batcher.waiting < 1:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    app.close()
    t.join(DEADLINE)
    assert told, "the caller was answered"
    again = Conveyor(f"sqlite:///{path}")
    assert again.get_job(told[0]).args == [1]
    again.close()


def test_interpreter_exit_stores_what_daemon_threads_left_buffered(tmp_path: Path) -> None:
    path = tmp_path / "exit.db"
    script = textwrap.dedent(
        f"""
        import threading, time
        from conveyor import AutoBatch, Conveyor
        # a long deadline: only the exit hook can write the job before the process ends
        app = Conveyor("sqlite:///{path}", autobatch=AutoBatch(max_jobs=100, max_delay=1.0))
        batcher = app.runtime.producer.autobatch
        threading.Thread(target=lambda: app.enqueue("t", args=["late"]), daemon=True).start()
        while batcher.waiting < 1:
            time.sleep(0.001)
        """
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    app = Conveyor(f"sqlite:///{path}")
    jobs = app.peek("default", 10)
    assert [j.args for j in jobs] == [["late"]]
    app.close()
