"""Fixed cost of one PostgreSQL claim + completion pair, worker and server CPU, by batch size.

    PYTHONPATH=$PWD/src:$PWD .venv/bin/python bench/pg_txn_cost.py 1 32 500

Starts a private cluster (``tests/support/pg_proc.py``), queues 6,400 plain jobs (their
envelopes as the producer writes them, ``envelope_dict``: the claim's fast decode path; until
session 7 the full ``job_to_dict`` envelope, which the claim decodes on its slow path), then claims
``B`` and completes them in a loop on one ``PostgresBroker`` (no worker threads), measuring
this process's CPU and the server processes' CPU. Two batch sizes give a line: CPU per pair =
fixed + B x per job. Used for docs/benchmarks.md ("Session 6, PostgreSQL defaults"): a worker
with the default 32 slots never claims or completes more than 32 jobs at a time, so the fixed
part is what its drain pays on top of a large-batch drain.
"""

from __future__ import annotations

import sys
import time

import orjson
import psutil
from tests.support.pg_proc import PgServer

from bench.pg_drain_cpu import tree_cpu
from conveyor.broker.base import Ack
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.core.serialization import envelope_dict

JOBS = 6400


def measure(srv: PgServer, batch: int) -> tuple[float, float]:
    """Worker and server CPU (µs) per claim + completion pair of ``batch`` jobs."""
    pg = PostgresBroker.from_url(srv.url)
    try:
        pg.flush_all()
        now = time.time()
        for i in range(0, JOBS, 1000):
            jobs = [Job(id=f"j{k}", task="t") for k in range(i, i + 1000)]
            pg.enqueue(jobs, now, [orjson.dumps(envelope_dict(j)) for j in jobs])

        def pair() -> None:
            leases = pg.claim(["default"], now, limit=batch, worker_id="w")
            pg.complete([Ack(x.job.id, x.token) for x in leases], now)

        for _ in range(3):  # prepare the statements on the connection
            pair()
        pairs = (JOBS - 3 * batch) // batch - 1
        pid = srv.pid()
        assert pid is not None
        s0, w0 = tree_cpu(psutil.Process(pid)), time.process_time()
        for _ in range(pairs):
            pair()
        s1, w1 = tree_cpu(psutil.Process(pid)), time.process_time()
        return (w1 - w0) / pairs * 1e6, (s1 - s0) / pairs * 1e6
    finally:
        pg.close()


def main(sizes: list[int]) -> None:
    """Print worker and server CPU per pair and per job for each batch size."""
    with PgServer() as srv:
        for b in sizes:
            w, s = measure(srv, b)
            print(
                f"batch {b}: per claim+completion pair worker {w:,.0f} us, server {s:,.0f} us;"
                f" per job worker {w / b:.1f} us, server {s / b:.1f} us"
            )


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [1, 32, 500])
