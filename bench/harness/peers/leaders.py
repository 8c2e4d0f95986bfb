"""The field's leaders: BullMQ (Node), Sidekiq (Ruby) and BullMQ's Python port.

BullMQ and Sidekiq run on their own runtimes, so their workers and producers are scripts under
``bench/peers_node/`` (Node 20, ``node_modules`` installed there by ``npm ci``) and
``bench/peers_ruby/`` (Debian's Ruby 3.1 with ``ruby-sidekiq`` 6.4.1 from apt). Their producers
take the command line of :mod:`bench.harness.producer` and print the same JSON line, and their
job bodies write the same log lines as :mod:`bench.peer_tasks.body`.

* **bullmq** — default: a ``Worker`` at BullMQ's default concurrency 1. best: concurrency 50
  (the issue's "typical" setting; 10, 100 and 200 are tuning candidates). io: concurrency 100.
  Completed jobs are kept (BullMQ's default) in every mode.
* **sidekiq** — default: ``sidekiq -q bench`` (Sidekiq 6.4's default concurrency 10, INFO log
  lines at start and end of every job). best: concurrency 30 and log level WARN (5, 10 and 50
  with WARN are tuning candidates). io: concurrency 100 (threads).
* **bullmq-python** — as bullmq, on ``.bench-venv/envs/bullmq``.

Crash check: each runs its default worker. A BullMQ job whose worker died comes back only when
its 30 s lock has expired and a stalled-jobs check (every 30 s) has seen it; Sidekiq OSS's
``BRPOP`` fetch loses a job whose worker was killed (only Sidekiq Pro's super_fetch recovers
it). Both therefore count as lost within the harness's window, as the crash check defines;
for BullMQ the second worker then keeps running up to 75 s more, and the results say whether
(and when) the missing jobs came back.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import ClassVar

from bench.harness.adapter import Adapter

_NODE_DIR = Path("bench") / "peers_node"
_RUBY_DIR = Path("bench") / "peers_ruby"
_BULLMQ_CONCURRENCY = {"default": 1, "best": 50, "io": 100, "c10": 10, "c100": 100, "c200": 200}
#: BullMQ redelivers a dead worker's job once its 30 s lock expired and a stalled-jobs check
#: (every 30 s) ran: the crash check waits this long past its window to see it happen.
_LOCK_FOLLOWUP = 75.0
_SIDEKIQ_CONCURRENCY = {
    **{"default": 10, "best": 30, "io": 100, "c5": 5, "c10": 10, "c50": 50},
    **{"c10-yjit": 10, "c30-yjit": 30},
}


def _which(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise RuntimeError(f"{program} not found on the PATH (bench/setup_peers.sh installs it)")
    return found


class ExternalAdapter(Adapter):
    """A system whose producer and worker are scripts on another runtime (not Python)."""

    #: The runtime executable looked up on the PATH, e.g. ``node``.
    runtime: ClassVar[str]
    #: The producer script, relative to the repository root.
    producer_script: ClassVar[Path]
    client_module = ""

    def producer_command(self) -> list[str]:
        """``<runtime> <producer script>``."""
        return [_which(self.runtime), str(self.ctx.repo / self.producer_script)]

    def runtime_label(self) -> str:
        """The runtime's path (its version is part of :meth:`version`)."""
        return shutil.which(self.runtime) or self.runtime

    def version(self) -> str:
        """``<library version> (<runtime> <version>)`` as the producer script reports it."""
        return str(self._produce("version", timeout=60)["version"])


class BullMQAdapter(ExternalAdapter):
    """BullMQ 5 on Node: Lua scripts, a lock per active job, completed jobs kept."""

    name = "bullmq"
    package = "bullmq"
    db = 7
    runtime = "node"
    producer_script = _NODE_DIR / "bullmq_producer.js"
    bulk_api = "queue.addBulk"
    tuning_modes: ClassVar[tuple[str, ...]] = ("c10", "c100", "c200")
    crash_followup = _LOCK_FOLLOWUP

    def worker_command(self, mode: str) -> list[str]:
        if mode not in _BULLMQ_CONCURRENCY:
            raise ValueError(f"bullmq: unknown mode {mode!r}")
        return [_which("node"), str(self.ctx.repo / _NODE_DIR / "bullmq_worker.js")]

    def worker_env(self, mode: str) -> dict[str, str]:
        return {"BENCH_BULLMQ_CONCURRENCY": str(_BULLMQ_CONCURRENCY[mode])}


class SidekiqAdapter(ExternalAdapter):
    """Sidekiq 6.4 (Debian) on Ruby 3.1: BRPOP fetch from a list, one thread per job slot."""

    name = "sidekiq"
    package = "sidekiq"
    db = 8
    runtime = "ruby"
    producer_script = _RUBY_DIR / "sidekiq_producer.rb"
    bulk_api = "Sidekiq::Client.push_bulk"
    tuning_modes: ClassVar[tuple[str, ...]] = ("c5", "c10", "c50", "c10-yjit", "c30-yjit")

    def worker_command(self, mode: str) -> list[str]:
        if mode not in _SIDEKIQ_CONCURRENCY:
            raise ValueError(f"sidekiq: unknown mode {mode!r}")
        jobs = str(self.ctx.repo / _RUBY_DIR / "sidekiq_jobs.rb")
        cmd = [_which("sidekiq"), "-r", jobs, "-q", "bench"]
        return cmd if mode == "default" else [*cmd, "-c", str(_SIDEKIQ_CONCURRENCY[mode])]

    def worker_env(self, mode: str) -> dict[str, str]:
        if mode in ("default", "io"):
            return {}
        yjit = {"RUBY_YJIT_ENABLE": "1"} if mode.endswith("-yjit") else {}
        return {"BENCH_SIDEKIQ_LOG_LEVEL": "warn"} | yjit


class BullMQPythonAdapter(Adapter):
    """BullMQ's Python port (asyncio) with the Node version's Lua scripts."""

    name = "bullmq-python"
    package = "bullmq"
    db = 9
    venv = ".bench-venv/envs/bullmq"
    client_module = "bench.peer_tasks.bullmq_tasks"
    bulk_api = "queue.addBulk"
    tuning_modes: ClassVar[tuple[str, ...]] = ("c10", "c100", "c200")
    crash_followup = _LOCK_FOLLOWUP

    def worker_command(self, mode: str) -> list[str]:
        if mode not in _BULLMQ_CONCURRENCY:
            raise ValueError(f"bullmq-python: unknown mode {mode!r}")
        return [str(self.python), "-m", self.client_module]

    def worker_env(self, mode: str) -> dict[str, str]:
        return {"BENCH_BULLMQ_CONCURRENCY": str(_BULLMQ_CONCURRENCY[mode])}
