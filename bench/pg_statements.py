"""Where a PostgreSQL drain's server time goes, statement by statement (``pg_stat_statements``).

    PYTHONPATH=$PWD/src:$PWD .venv/bin/python bench/pg_statements.py 32 20000

Starts a private cluster (``tests/support/pg_proc.py``) with ``pg_stat_statements`` loaded,
queues N plain jobs and drains them on one ``PostgresBroker`` in this process in cycles of B
(``claim`` then ``complete`` of that batch: what a worker sends, without its threads); B = -S:
a real ``Worker`` with S slots drains them in this process instead (``drain_worker``). Prints,
per statement, its execution and planning time per job (``total_exec_time`` / N,
``total_plan_time`` / N: ``track_planning`` on), its calls and plans, their sum, and
the server processes' CPU per job: the difference is what runs outside the executors (parse,
bind, protocol, transaction start and commit, the WAL writer, autovacuum).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import orjson
import psutil
import psycopg
from tests.support.pg_proc import PgServer

from bench.pg_drain_cpu import tree_cpu
from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.core.serialization import envelope_dict

TOP = 12  # statements listed


def drain(pg: PostgresBroker, batch: int, now: float) -> int:
    """Claim and complete until empty; the number of jobs drained."""
    total = 0
    while True:
        got = pg.claim(["default"], now, limit=batch, worker_id="w")
        if not got:
            return total
        pg.complete([Ack(x.job.id, x.token) for x in got], now)
        total += len(got)


def drain_worker(
    url: str, n: int, concurrency: int, ready: Callable[[], float], cpu: Callable[[], float]
) -> tuple[float, float, float]:
    """Queue ``n`` no-op jobs, call ``ready`` (it resets the statistics and returns the
    server's CPU so far), and drain them with a real ``Worker`` (``concurrency`` slots) in this
    process: this process's CPU from then to the last completion, and the server's CPU
    (``cpu``) at both ends."""
    from conveyor import Conveyor

    app = Conveyor(url)

    @app.task
    def noop() -> None:
        """Nothing: the drain measures the queue."""

    for i in range(0, n, 1000):
        app.enqueue_many([noop.s() for _ in range(min(1000, n - i))])
    worker = app.worker(concurrency=concurrency, handle_signals=False, heartbeat=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    s0 = ready()
    w0 = time.process_time()
    thread.start()
    while worker.processed < n:
        time.sleep(0.005)
    w1, s1 = time.process_time(), cpu()
    worker.stop()
    thread.join(30)
    app.close()
    return w1 - w0, s0, s1


def main(batch: int, n: int) -> None:
    """Drain ``n`` jobs in batches of ``batch``; print the statements' time per job."""
    srv = PgServer()
    srv.init()
    with open(srv.data / "postgresql.conf", "a") as f:
        f.write("shared_preload_libraries = 'pg_stat_statements'\n")
        f.write("pg_stat_statements.track_utility = on\n")
        f.write("pg_stat_statements.track_planning = on\n")
    with srv, psycopg.connect(srv.url, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION pg_stat_statements")
        server = psutil.Process(srv.pid() or 0)

        def ready() -> float:
            admin.execute("ANALYZE")
            admin.execute("SELECT pg_stat_statements_reset()")
            return tree_cpu(server)

        if batch > 0:
            pg = PostgresBroker.from_url(srv.url)
            try:
                pg.flush_all()
                now = time.time()
                for i in range(0, n, 1000):
                    jobs = [Job(id=f"j{k}", task="t") for k in range(i, i + 1000)]
                    pg.enqueue(jobs, now, [orjson.dumps(envelope_dict(j)) for j in jobs])
                s0, w0 = ready(), time.process_time()
                assert drain(pg, batch, now) == n
                s1, w1 = tree_cpu(server), time.process_time()
            finally:
                pg.close()
        else:  # a real worker with -batch slots
            w0 = 0.0
            w1, s0, s1 = drain_worker(srv.url, n, -batch, ready, lambda: tree_cpu(server))
        rows = admin.execute(
            "SELECT calls, total_exec_time, total_plan_time, plans, query FROM pg_stat_statements"
            " WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC"
        ).fetchall()
    total = sum(r[1] + r[2] for r in rows) * 1000 / n
    print(
        f"B={batch} n={n}: server CPU {(s1 - s0) / n * 1e6:.1f} us/job, this process"
        f" {(w1 - w0) / n * 1e6:.1f} us/job; statements' execution + planning {total:.1f} us/job"
    )
    print("  exec us/job  plan us/job  calls  plans  statement")
    for calls, exec_ms, plan_ms, plans, query in rows[:TOP]:
        text = " ".join(query.split())[: 90 if batch > 0 else 300]
        print(
            f"  {exec_ms * 1000 / n:6.2f} {plan_ms * 1000 / n:6.2f} {calls:6d} {plans:6d}  {text}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
