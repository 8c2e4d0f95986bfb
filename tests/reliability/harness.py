"""Jepsen-style accounting for the reliability suite: real worker processes, a paced producer,
an append-only execution ledger outside the broker, and a checker that compares the three.

* ``Workers`` — one ``conveyor worker tests.reliability.ledger_app:app`` supervisor (its own
  process group, its own working directory, which also marks every process it starts).
* ``Producer`` — a thread that enqueues numbered jobs at a steady rate (or in bursts) and
  records, per job, whether the enqueue returned (``ok``) or raised (``failed``: indeterminate —
  it may or may not have been stored). Job ids are deterministic (``job-<n>``), so
  indeterminate ones can be found.
* ``Ledger`` — reads the ``start``/``done`` lines the handlers appended.
* ``kill_worker`` — the nemesis: SIGKILL a worker process and record a ``Kill`` (pid, time, the
  jobs whose lease it held at that moment).
* ``check`` — lost, duplicated, explained; the numbers go to ``RELIABILITY_RESULTS`` (JSON lines)
  when that variable names a file, and are printed (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conveyor import Conveyor, JobState
from conveyor.config import Retention, Settings
from conveyor.worker.supervisor import CRASH_WINDOW
from tests.worker.harness import CONVEYOR, FAST_ENV, REPO

APP = "tests.reliability.ledger_app:app"
QUEUE = "default"
#: completed jobs are kept (not trimmed by retention) so the checker can read every one
KEEP = {"CONVEYOR_RETENTION_COMPLETED_MAX": "1000000", "CONVEYOR_RETENTION_EVENTS_MAX": "2000"}


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``pred`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def checker_app(url: str) -> Conveyor:
    """An app for the test process (enqueue, inspect) that keeps every completed job."""
    retention = Retention(completed_max=1_000_000, events_max=2000)
    return Conveyor(url, settings=Settings(retention=retention))


# ---------------------------------------------------------------------- processes
def _alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def process_age(pid: int) -> float:
    """Seconds since process ``pid`` started (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            started = int(fh.read().rsplit(")", 1)[-1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started / os.sysconf("SC_CLK_TCK"))


def marked_pids(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (a test's private directory)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and _alive(int(entry)):
            out.append(int(entry))
    return out


class Workers:
    """A ``conveyor worker`` supervisor and its worker processes, started for one test.

    It runs in ``tmp/<name>``; that path is in every worker process's command line (the child
    config carries the supervisor's cwd), which is how teardown finds them all, even orphans.
    """

    def __init__(self, url: str, tmp: Path, name: str, *args: str, env: dict[str, str]) -> None:
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=False)
        self.log_path = self.dir / "worker.log"
        environ = {**os.environ, **FAST_ENV, **KEEP, "CONVEYOR_URL": url, **env}
        environ["PYTHONPATH"] = str(REPO) + os.pathsep + environ.get("PYTHONPATH", "")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [CONVEYOR, "worker", APP, *args],
                cwd=self.dir,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The supervisor's pid."""
        return self.proc.pid

    def output(self) -> str:
        """Everything the supervisor and its worker processes logged so far."""
        return self.log_path.read_text(errors="replace")

    def children(self) -> list[int]:
        """Every worker process the supervisor started, oldest first."""
        pids = []
        for line in self.output().splitlines():
            if "conveyor.supervisor: worker process" in line and "started (slot" in line:
                pids.append(int(line.split("worker process ")[1].split()[0]))
        return pids

    def live_children(self) -> list[int]:
        """Worker processes that run now and have announced themselves (claiming)."""
        text = self.output()
        return [p for p in self.children() if f":{p}:" in text and _alive(p)]

    def wait_ready(self, count: int, timeout: float = 30.0) -> list[int]:
        """Until ``count`` worker processes run and logged their start line."""

        def ready() -> list[int] | None:
            live = self.live_children()
            return live if len(live) >= count else None

        pids: list[int] = wait_until(ready, timeout, f"{count} worker processes")
        return pids

    def pick_victim(self, rng: random.Random, settled: float = CRASH_WINDOW) -> int:
        """A random live worker process, preferring those older than ``settled`` seconds: the
        supervisor backs off restarting a slot whose process keeps dying young (crash-loop
        protection), so killing only young processes would starve the pool in a long run."""
        live = sorted(self.wait_ready(1))
        old = [pid for pid in live if process_age(pid) >= settled]
        return rng.choice(old or live)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Signal the supervisor (it forwards SIGTERM/SIGINT to its worker processes)."""
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The supervisor's exit code."""
        return self.proc.wait(timeout)

    def close(self) -> None:
        """Kill whatever is left (test teardown; safe to call twice): the supervisor's process
        group, then every worker process (each runs in a group of its own) by its pid."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in marked_pids(f'"{self.dir}"'):  # as it appears in the child's JSON config
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


# ---------------------------------------------------------------------- producer
class Producer(threading.Thread):
    """Enqueue ``jobs`` ([(n, task, args)]) at ``rate`` per second from a thread, in bursts of
    ``burst`` jobs (enqueued one by one, as fast as the broker takes them)."""

    def __init__(
        self, url: str, jobs: list[tuple[int, str, list[Any]]], rate: float, burst: int = 1
    ) -> None:
        super().__init__(name="reliability-producer", daemon=True)
        self.url, self.jobs, self.rate, self.burst = url, jobs, rate, max(1, burst)
        self.ok: dict[int, str] = {}  # n -> job id: the enqueue returned
        self.failed: dict[int, str] = {}  # n -> job id: the enqueue raised (indeterminate)
        self.errors: list[str] = []
        self.started_at = self.finished_at = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        app = checker_app(self.url)
        self.started_at = began = time.monotonic()
        try:
            for i, (n, task, args) in enumerate(self.jobs):
                if self._halt.is_set():
                    break
                delay = began + (i - i % self.burst) / self.rate - time.monotonic()
                if delay > 0:
                    self._halt.wait(delay)
                job_id = f"job-{n}"
                try:
                    app.enqueue(task, args=args, job_id=job_id)
                except Exception as exc:  # indeterminate: it may have been stored
                    self.failed[n] = job_id
                    self.errors.append(f"{n}: {type(exc).__name__}: {exc}")
                else:
                    self.ok[n] = job_id
        finally:
            self.finished_at = time.monotonic()
            app.close()

    def stop(self) -> None:
        """Stop enqueuing (the thread ends after its current call)."""
        self._halt.set()

    @property
    def attempted(self) -> int:
        """Enqueues that returned or raised so far."""
        return len(self.ok) + len(self.failed)


def short_jobs(
    count: int, seed: int, low: float = 0.005, high: float = 0.020, first: int = 0
) -> list[tuple[int, str, list[Any]]]:
    """``count`` ``work`` jobs of ``low``..``high`` seconds each (seeded)."""
    rng = random.Random(seed)
    return [(n, "work", [n, round(rng.uniform(low, high), 4)]) for n in range(first, first + count)]


# ---------------------------------------------------------------------- ledger
@dataclass(frozen=True)
class Line:
    """One ledger line."""

    event: str
    n: int
    pid: int
    t: float


class Ledger:
    """The handlers' append-only execution log."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Line]:
        """Every complete line, in the order written."""
        if not self.path.exists():
            return []
        out = []
        for raw in self.path.read_bytes().splitlines():
            parts = raw.split()
            if len(parts) == 4:
                out.append(Line(parts[0].decode(), int(parts[1]), int(parts[2]), float(parts[3])))
        return out

    def starts(self) -> dict[int, list[Line]]:
        """Start lines by job number, in order."""
        out: dict[int, list[Line]] = defaultdict(list)
        for line in self.read():
            if line.event == "start":
                out[line.n].append(line)
        return out

    def done(self) -> dict[int, list[Line]]:
        """Done lines by job number, in order."""
        out: dict[int, list[Line]] = defaultdict(list)
        for line in self.read():
            if line.event == "done":
                out[line.n].append(line)
        return out


# ---------------------------------------------------------------------- nemesis
@dataclass
class Kill:
    """One fault: what was killed, when, and which jobs it held at that moment."""

    pid: int
    at: float  # time.time()
    held: set[str]  # ids of jobs leased to this process when it died


def leased_to(app: Conveyor, pid: int) -> set[str]:
    """Ids of the active jobs whose lease belongs to worker process ``pid``."""
    held: set[str] = set()
    page = 1
    while True:
        result = app.search(state=JobState.ACTIVE, page=page, page_size=1000)
        held |= {j.id for j in result.items if j.worker_id and f":{pid}:" in j.worker_id}
        if page >= result.pages:
            return held
        page += 1


def kill_worker(app: Conveyor, pid: int) -> Kill:
    """SIGKILL worker process ``pid`` and record the leases it held (they can no longer change:
    the process is gone and the leases only move when they expire)."""
    at = time.time()
    os.kill(pid, signal.SIGKILL)
    return Kill(pid, at, leased_to(app, pid))


def sleep_until(deadline: float, alive: Callable[[], None] | None = None) -> None:
    """Wait for a point of the fault schedule (monotonic), calling ``alive`` every 50 ms."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(0.05, left))
        if alive is not None:
            alive()


# ---------------------------------------------------------------------- checker
def counts(app: Conveyor) -> dict[str, int]:
    """Job counts by state in the test queue."""
    return dict(app.broker.counts().get(QUEUE, {}))


def wait_settled(
    app: Conveyor, expected_completed: int, timeout: float, *, dead: int = 0
) -> dict[str, int]:
    """Until ``expected_completed`` jobs are completed and ``dead`` dead-lettered, and nothing is
    pending, scheduled, retrying or active."""

    def settled() -> dict[str, int] | None:
        c = counts(app)
        busy = sum(c.get(s, 0) for s in ("pending", "scheduled", "retry_scheduled", "active"))
        done = c.get("completed", 0) >= expected_completed and c.get("dead_letter", 0) >= dead
        return c if done and not busy else None

    try:
        return wait_until(settled, timeout, "every job to finish", interval=0.2)  # type: ignore[no-any-return]
    except AssertionError as exc:
        raise AssertionError(f"{exc}; counts now: {counts(app)}; {unfinished(app)}") from None


def unfinished(app: Conveyor, limit: int = 5) -> str:
    """Why the first few dead-lettered or still active jobs are not completed (for a failure)."""
    lines = []
    for state in ("dead_letter", "active"):
        for job in app.search(queue=QUEUE, state=state, page_size=limit).items:
            errors = [(e.get("kind"), e.get("message", "")[:200]) for e in job.errors[-3:]]
            lines.append(f"{job.id} {state} attempts={job.attempts} lost={job.lost} {errors}")
    return "; ".join(lines) or "no dead or active job"


@dataclass
class Report:
    """What the checker found."""

    name: str
    enqueued: int  # enqueues that returned
    indeterminate: int  # enqueues that raised
    recovered: int  # of those, stored anyway and completed
    executions: int  # start lines
    completed: int
    lost: list[int]
    duplicates: list[int]
    unexplained: list[int]
    kills: int
    held_at_kills: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The numbers, for the log and docs/reliability.md."""
        return {
            "test": self.name,
            "jobs": self.enqueued,
            "indeterminate": self.indeterminate,
            "recovered": self.recovered,
            "executions": self.executions,
            "completed": self.completed,
            "kills": self.kills,
            "held_at_kills": self.held_at_kills,
            "lost": len(self.lost),
            "duplicates": len(self.duplicates),
            "unexplained": len(self.unexplained),
            "seconds": round(self.seconds, 1),
            **self.extra,
        }

    def publish(self) -> None:
        """Print the summary and append it to ``$RELIABILITY_RESULTS`` if set."""
        publish(self.summary())


def publish(numbers: dict[str, Any]) -> None:
    """Print one result line and append it to ``$RELIABILITY_RESULTS`` if set."""
    line = json.dumps(numbers)
    print(f"\nRELIABILITY {line}")
    target = os.environ.get("RELIABILITY_RESULTS")
    if target:
        with open(target, "a") as fh:
            fh.write(line + "\n")


def check(
    name: str,
    app: Conveyor,
    producer: Producer,
    ledger: Ledger,
    kills: Iterable[Kill],
    began: float,
    *,
    explained: Callable[[str, Line], bool] | None = None,
    exclude: Iterable[int] = (),
) -> Report:
    """Compare what was enqueued, what ran (the ledger) and what the broker says.

    * lost: an enqueue that returned whose job has no ``done`` line or is not ``completed``;
    * duplicate: a job with more than one ``start`` line;
    * explained: every start but the last was made by a process that was then killed while it
      held that job's lease, or ``explained(job_id, start_line)`` says why it ran again (a
      lease handed back on shutdown, a Redis restart).
    """
    kills = list(kills)
    skip = set(exclude)
    starts, done = ledger.starts(), ledger.done()
    holders: dict[str, set[int]] = defaultdict(set)
    for kill in kills:
        for job_id in kill.held:
            holders[job_id].add(kill.pid)
    lost, completed = [], 0
    for n, job_id in sorted(producer.ok.items()):
        if n in skip:
            continue
        job = app.broker.get(job_id)
        if not done.get(n) or job is None or job.state is not JobState.COMPLETED:
            lost.append(n)
        else:
            completed += 1
    recovered = 0
    for job_id in producer.failed.values():
        job = app.broker.get(job_id)
        if job is not None:
            assert job.state is JobState.COMPLETED, f"indeterminate {job_id} is {job.state}"
            recovered += 1
    duplicates, unexplained = [], []
    for n, lines in sorted(starts.items()):
        if n in skip or len(lines) < 2:
            continue
        duplicates.append(n)
        job_id = f"job-{n}"
        for line in lines[:-1]:
            by_kill = line.pid in holders.get(job_id, set())
            if not (by_kill or (explained is not None and explained(job_id, line))):
                unexplained.append(n)
                break
    return Report(
        name=name,
        enqueued=len(set(producer.ok) - skip),
        indeterminate=len(producer.failed),
        recovered=recovered,
        executions=sum(len(v) for v in starts.values()),
        completed=completed,
        lost=lost,
        duplicates=duplicates,
        unexplained=unexplained,
        kills=len(kills),
        held_at_kills=sum(len(k.held) for k in kills),
        seconds=time.monotonic() - began,
    )
