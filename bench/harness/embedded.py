"""A Conveyor worker on the in-memory broker that fills its own queue first.

Runs on the project's interpreter (``.venv``), started by the ``conveyor-memory`` adapter:

    BENCH_PREFILL=20000 BENCH_PREFILL_SLEEP=0.0 python -m bench.harness.embedded APP [options]

It imports APP's module (whose broker is ``memory://``), enqueues job numbers
``0..BENCH_PREFILL-1`` with ``app.enqueue_many`` in batches of 1,000, then runs the worker that
``conveyor worker APP --no-supervisor [options]`` runs, in this same process, so it sees the
same in-memory queue (the CLI itself refuses ``memory://``, rightly for users). Options:
``--concurrency N`` and ``--log-level LEVEL``. The drain is timed from the job log (first
start to last finish), so the filling does not count.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys


def prefill(target: str, count: int, sleep_s: float) -> None:
    """Enqueue ``count`` jobs of the shared body into the app named by ``target``."""
    from conveyor.task import JobSpec

    module_name, _, attr = target.partition(":")
    app = getattr(importlib.import_module(module_name), attr)
    for start in range(0, count, 1000):
        batch = range(start, min(start + 1000, count))
        app.enqueue_many([JobSpec("bench_job", (n, sleep_s, 0.0)) for n in batch])


def main(argv: list[str]) -> int:
    """Fill the queue, then run the CLI's in-process worker on it until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m bench.harness.embedded")
    parser.add_argument("app")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    prefill(
        args.app,
        int(os.environ.get("BENCH_PREFILL", "0")),
        float(os.environ.get("BENCH_PREFILL_SLEEP", "0")),
    )
    from conveyor.worker.child import ChildConfig, run_worker_process
    from conveyor.worker.logs import setup_logging

    setup_logging("text", args.log_level)
    config = ChildConfig(
        app=args.app,
        concurrency=args.concurrency,
        log_level=args.log_level.upper(),
        sys_path=[os.getcwd()],
    )
    run_worker_process(config, supervised=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
