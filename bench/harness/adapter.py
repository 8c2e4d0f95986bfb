"""The adapter interface: what the harness needs from each job system.

An adapter runs in the harness process (``.bench-venv``) but never imports its system. The
system's own code runs in separate processes, each started with the adapter's interpreter
(:attr:`Adapter.python`):

* the **worker**: ``worker_command(mode)`` started by :meth:`Adapter.start_worker` with
  ``$BENCH_LOG`` (the job log), ``$BENCH_REDIS_URL`` and ``PYTHONPATH=<repo>`` set;
* the **producer**: ``python -m bench.harness.producer --client <client_module>``, which
  imports ``client_module`` and calls its ``make_client(redis_url)`` (see
  :mod:`bench.harness.producer` for the client protocol).

To add a system, subclass :class:`Adapter`, set the class attributes, implement
:meth:`worker_command` (and :meth:`worker_env` if modes differ by environment), write a
client/task module whose task body calls :func:`bench.peer_tasks.body.run_sync` (or
``run_async``), and register the class in :mod:`bench.harness.peers`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from bench.harness.joblog import JobLog
from bench.harness.redis_server import RedisServer

#: Modes every adapter supports. ``default``: the system's out-of-the-box worker with one
#: worker process; ``best``: the fastest single-process settings found for no-op jobs;
#: ``io``: concurrency 100 (where the system allows) for jobs that sleep. Adapters may add
#: more names in :attr:`Adapter.tuning_modes` for the ``tune`` scenario.
MODES = ("default", "best", "io")


@dataclass
class BenchContext:
    """What every adapter gets: the repo root, the harness's Redis, a scratch directory."""

    repo: Path
    redis: RedisServer
    workdir: Path


@dataclass
class ProducerResult:
    """Timing of one producer run (the timed loop only, not interpreter start-up)."""

    count: int
    elapsed: float
    rate: float
    api: str


class Adapter(ABC):
    """One job system as seen by the harness. Subclasses set the class attributes below."""

    #: Short name used on the command line and in results (``--systems celery,rq``).
    name: ClassVar[str]
    #: Distribution name whose version is reported (``importlib.metadata.version``).
    package: ClassVar[str]
    #: Redis database number reserved for this system (flushed between scenarios).
    db: ClassVar[int]
    #: Module with ``make_client(redis_url)`` for the producer (and usually the tasks).
    client_module: ClassVar[str]
    #: Virtualenv (relative to the repo) whose ``bin/python`` runs producer and worker.
    venv: ClassVar[str] = ".bench-venv"
    #: Human description of the bulk API, or ``None`` when the system has none.
    bulk_api: ClassVar[str | None] = None
    #: Per-scenario job-count caps for slow systems, e.g. ``{"drain:default": 3000}``.
    count_caps: ClassVar[dict[str, int]] = {}
    #: Extra worker modes tried by the ``tune`` scenario (``best`` is always included).
    tuning_modes: ClassVar[tuple[str, ...]] = ()
    #: Concurrency used in ``io`` mode (100 unless the system cannot run jobs concurrently).
    io_concurrency: ClassVar[int] = 100
    #: Worker mode of the crash check. A system whose recovery needs a setting shorter than the
    #: harness's idle window (a lease or visibility timeout) names a mode here; its doc says why.
    crash_mode: ClassVar[str] = "default"
    #: Seconds the crash check's second worker keeps running after the window when jobs are
    #: still missing, to tell late redelivery from loss (0: not measured; see scenarios.crash).
    crash_followup: ClassVar[float] = 0.0
    #: Scenarios this system can run (``None``: all). Others are recorded as skipped.
    supported_scenarios: ClassVar[tuple[str, ...] | None] = None
    #: Whether the system's queue lives in the harness's Redis (then every scenario also
    #: reports the redis-server's CPU time per job).
    uses_redis: ClassVar[bool] = True

    def __init__(self, ctx: BenchContext) -> None:
        self.ctx = ctx
        self.last_output: Path | None = None
        self._spawned = 0

    # ----------------------------------------------------------------- to implement
    @abstractmethod
    def worker_command(self, mode: str) -> list[str]:
        """argv of a worker process for ``mode`` (argv[0] from this adapter's venv)."""

    def worker_env(self, mode: str) -> dict[str, str]:
        """Extra environment for the worker in ``mode`` (settings not expressible as flags)."""
        return {}

    # ----------------------------------------------------------------- derived
    @property
    def python(self) -> Path:
        """Interpreter that runs this system's producer and worker."""
        return self.ctx.repo / self.venv / "bin" / "python"

    def bin(self, script: str) -> str:
        """Path of a console script installed in this adapter's venv."""
        return str(self.python.parent / script)

    @property
    def redis_url(self) -> str:
        """``redis://127.0.0.1:PORT/DB`` for this system."""
        return f"{self.ctx.redis.url}/{self.db}"

    def describe_mode(self, mode: str) -> str:
        """The worker command line (and env knobs) of ``mode``, for the results file."""
        argv = [Path(a).name if i == 0 else a for i, a in enumerate(self.worker_command(mode))]
        env = " ".join(f"{k}={v}" for k, v in sorted(self.worker_env(mode).items()))
        text = (env + " " if env else "") + " ".join(argv)
        return text.replace(self.redis_url, f"redis://127.0.0.1:PORT/{self.db}").replace(
            str(self.ctx.repo), "."
        )

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        env["PYTHONPATH"] = str(self.ctx.repo)
        env["BENCH_REDIS_URL"] = self.redis_url
        env["PYTHONUNBUFFERED"] = "1"
        return env

    # ----------------------------------------------------------------- worker lifecycle
    def start_worker(self, mode: str, job_log: Path) -> subprocess.Popen[bytes]:
        """Start one worker process (in its own session) writing jobs to ``job_log``."""
        self._spawned += 1
        out = self.ctx.workdir / f"{self.name}-worker-{self._spawned}-{mode}.out"
        self.last_output = out
        env = self._env() | self.worker_env(mode) | {"BENCH_LOG": str(job_log)}
        with open(out, "wb") as fh:
            return subprocess.Popen(
                self.worker_command(mode),
                cwd=self.ctx.repo,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _tree(self, proc: subprocess.Popen[bytes]) -> list[int]:
        try:
            import psutil

            return [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        except Exception:
            return []

    def _signal_all(self, proc: subprocess.Popen[bytes], sig: int, pids: list[int]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)  # the worker's own session/process group
        for pid in pids:  # descendants that left the group, if any
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop_worker(self, proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
        """SIGTERM the worker's process group, SIGKILL whatever is left after ``grace``."""
        if proc.poll() is not None:
            self._signal_all(proc, signal.SIGKILL, [])
            return
        pids = self._tree(proc)
        self._signal_all(proc, signal.SIGTERM, [])
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
        self._signal_all(proc, signal.SIGKILL, pids)
        proc.wait()

    def kill_worker(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 the whole worker process tree at once (the crash check)."""
        self._signal_all(proc, signal.SIGKILL, self._tree(proc))
        proc.wait()

    def worker_rss(self, proc: subprocess.Popen[bytes]) -> tuple[int, int]:
        """(total RSS in bytes, number of processes) of the worker's whole process tree."""
        import psutil

        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total, len(procs)

    def worker_output_tail(self, chars: int = 1500) -> str:
        """The end of the last worker's stdout/stderr (for error reports)."""
        if self.last_output is None or not self.last_output.exists():
            return ""
        return self.last_output.read_text(errors="replace")[-chars:]

    # ----------------------------------------------------------------- producer
    def producer_command(self) -> list[str]:
        """argv prefix of a producer process (``--url``, ``--op`` and the sizes follow)."""
        return [str(self.python), "-m", "bench.harness.producer", "--client", self.client_module]

    def runtime_label(self) -> str:
        """The interpreter of this system's processes, for the results file."""
        return str(self.python.relative_to(self.ctx.repo))

    def _produce(
        self, op: str, *extra: str, timeout: float = 900, env: dict[str, str] | None = None
    ) -> dict[str, object]:
        cmd = [*self.producer_command(), "--url", self.redis_url, "--op", op, *extra]
        run = subprocess.run(
            cmd,
            cwd=self.ctx.repo,
            env=self._env() | (env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if run.returncode != 0:
            raise RuntimeError(f"producer {op} failed ({run.returncode}): {run.stderr[-1500:]}")
        result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
        return result

    def _producer_result(self, raw: dict[str, object], api: str) -> ProducerResult:
        return ProducerResult(
            count=int(str(raw["count"])),
            elapsed=float(str(raw["elapsed"])),
            rate=float(str(raw["rate"])),
            api=api,
        )

    def enqueue_one(self, count: int, *, start: int = 0, sleep_s: float = 0.0) -> ProducerResult:
        """Enqueue ``count`` jobs numbered ``start..`` with one call each, from one process."""
        raw = self._produce(
            "one", "--count", str(count), "--start", str(start), "--sleep", str(sleep_s)
        )
        return self._producer_result(raw, "one call per job")

    def enqueue_threads(
        self, count: int, threads: int, env: dict[str, str] | None = None
    ) -> dict[str, object]:
        """One call per job from ``threads`` threads of one producer process (extra ``env``
        for the producer); the producer's raw summary, ``cpu_s`` included."""
        return self._produce("one", "--count", str(count), "--threads", str(threads), env=env)

    def enqueue_bulk(
        self, count: int, *, start: int = 0, sleep_s: float = 0.0, batch: int = 1000
    ) -> ProducerResult | None:
        """Enqueue with the system's bulk API in batches; ``None`` if it has no bulk API."""
        if self.bulk_api is None:
            return None
        raw = self._produce(
            "bulk",
            "--count",
            str(count),
            "--start",
            str(start),
            "--sleep",
            str(sleep_s),
            "--batch",
            str(batch),
        )
        return self._producer_result(raw, self.bulk_api)

    def enqueue_paced(self, count: int, interval: float, *, start: int = 0) -> ProducerResult:
        """Enqueue one job every ``interval`` seconds, each carrying its enqueue time."""
        raw = self._produce(
            "paced", "--count", str(count), "--start", str(start), "--interval", str(interval)
        )
        return self._producer_result(raw, "paced")

    def prefill(self, count: int, *, start: int = 0, sleep_s: float = 0.0) -> ProducerResult:
        """Queue jobs before a worker starts: bulk API when there is one, else one by one."""
        res = self.enqueue_bulk(count, start=start, sleep_s=sleep_s)
        return res if res is not None else self.enqueue_one(count, start=start, sleep_s=sleep_s)

    # ----------------------------------------------------------------- waiting, cleanup
    def wait_drained(
        self,
        log: JobLog,
        expected: range,
        timeout: float,
        *,
        stall: float | None = 30.0,
        proc: subprocess.Popen[bytes] | None = None,
    ) -> bool:
        """Wait until every job number in ``expected`` has finished (per the job log)."""
        return log.wait_for(expected, timeout, stall=stall, proc=proc)

    def flush(self) -> None:
        """FLUSHDB this system's Redis database."""
        self.ctx.redis.flushdb(self.db)

    def version(self) -> str:
        """Installed version of :attr:`package` in this adapter's venv."""
        return str(self._produce("version", "--package", self.package, timeout=60)["version"])

    def cap(self, key: str, count: int) -> int:
        """``count`` limited by :attr:`count_caps` for scenario ``key``."""
        return min(count, self.count_caps.get(key, count))
