"""RQ 3 on Redis.

default: ``rq worker`` (forks a work horse per job). best: ``SimpleWorker`` (runs jobs in
the worker process), quiet logging, results not kept (the SimpleWorker is what matters).
io: RQ runs one job at a time per worker process (concurrency means ``worker-pool``, i.e. more
processes), so the I/O scenario runs a ``SimpleWorker`` at concurrency 1 on fewer jobs.
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter


class RQAdapter(Adapter):
    """RQ with its default pickle serializer."""

    name = "rq"
    package = "rq"
    db = 2
    client_module = "bench.peer_tasks.rq_tasks"
    bulk_api = "Queue.enqueue_many (one pipeline per batch)"
    io_concurrency = 1
    count_caps: ClassVar[dict[str, int]] = {
        "drain:default": 1000,
        "drain:best": 3000,
        "io": 300,
        "tune": 500,
    }
    tuning_modes: ClassVar[tuple[str, ...]] = ("simple", "simple-quiet")

    def worker_command(self, mode: str) -> list[str]:
        base = [self.bin("rq"), "worker", "-u", self.redis_url, "--path", str(self.ctx.repo)]
        simple = ["-w", "rq.worker.SimpleWorker"]
        quiet = ["-q", "--disable-job-desc-logging"]
        if mode == "default":
            return [*base, "bench"]
        if mode == "simple":
            return [*base, *simple, "bench"]
        if mode == "simple-quiet":
            return [*base, *simple, *quiet, "bench"]
        if mode == "best":
            return [*base, *simple, *quiet, "--results-ttl", "0", "bench"]
        if mode == "io":
            return [*base, *simple, *quiet, "bench"]
        raise ValueError(f"rq: unknown mode {mode!r}")
