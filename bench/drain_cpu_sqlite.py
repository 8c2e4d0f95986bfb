"""Client CPU per job of an in-process SQLite drain (the SQLite twin of ``drain_cpu.py``).

Fills a fresh SQLite file with 5,000 no-op jobs, runs one threaded worker (``max_jobs``) until
they are done, and prints jobs/s and the process's CPU time per job (the database work runs in
this process too). Compare two source trees with PYTHONPATH, alternating, and keep the minimum
of a few runs each:

    PYTHONPATH=/tmp/old/src .venv/bin/python bench/drain_cpu_sqlite.py old
    PYTHONPATH=src .venv/bin/python bench/drain_cpu_sqlite.py new
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

from conveyor import Conveyor, JobSpec

JOBS = 5_000


def main(label: str, concurrency: int) -> None:
    """Drain ``JOBS`` jobs from a fresh SQLite file and print the rate and CPU per job."""
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        app = Conveyor(f"sqlite:///{Path(tmp) / 'drain.db'}")

        @app.task
        def bench_job(n: int) -> None:
            return None

        app.enqueue_many([JobSpec("bench_job", (i,)) for i in range(JOBS)])
        worker = app.worker(
            ["default"],
            concurrency=concurrency,
            handle_signals=False,
            heartbeat=False,
            max_jobs=JOBS,
        )
        t0, c0 = time.perf_counter(), time.process_time()
        worker.run()
        t1, c1 = time.perf_counter(), time.process_time()
    rate, cpu = JOBS / (t1 - t0), 1e6 * (c1 - c0) / JOBS
    print(f"{label}: {worker.processed} jobs, wall {rate:,.0f}/s, cpu {cpu:.1f} us/job")


if __name__ == "__main__":
    args = sys.argv[1:] + ["run", "32"][len(sys.argv) - 1 :]
    main(args[0], int(args[1]))
