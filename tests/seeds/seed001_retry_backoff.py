"""Seed 001, "Reto #29: cola de tareas con workers y reintentos", done with Conveyor.

The exercise (in Spanish) builds ``TaskQueue``: one worker step per ``tick()``, retries with
exponential backoff (``delay_inicial * factor ** (n - 1)`` after the n-th failure), an
allow-list of retryable exceptions, ``status(task_id)`` and ``metrics()``, all driven by an
injected clock (``ahora_fn``) so the tests never sleep. The mapping onto Conveyor:

    TaskQueue(max_reintentos, delay_inicial,   ->  @app.task(max_retries=max_reintentos,
              factor, ahora_fn)                      backoff=Backoff.exponential(base=delay_inicial,
                                                     factor=factor, jitter=0))
                                                   on Conveyor("memory://", clock=FakeClock())
    RelojFake.avanzar(s)                       ->  FakeClock.advance(s)
    enqueue(func, task_id=, excepciones=)      ->  task.options(job_id=...).enqueue();
                                                   excepciones -> @app.task(retry_on=...)
    tick()                                     ->  worker.process_next()  (time from the clock)
    status(task_id)                            ->  app.get_job(task_id)
    PENDING / RETRY / DONE / FAILED            ->  pending / retry_scheduled / completed /
                                                   dead_letter
    retries_left                               ->  derived from attempts, max_attempts and the
                                                   state (see ``retries_left`` below)
    next_run_at                                ->  job.run_at (while retry_scheduled)
    metrics()                                  ->  app.stats()["queues"][queue] counts

Conveyor's ``last_error`` uses the exercise's "Tipo: mensaje" format. One difference:
Conveyor refuses ``factor < 1`` (a backoff that shrinks), which the exercise allows.
Run it: ``python tests/seeds/seed001_retry_backoff.py``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from conveyor import Backoff, Conveyor, FakeClock, JobState, Task

# Conveyor state -> the exercise's state names.
SEED_STATE = {
    JobState.SCHEDULED: "PENDING",
    JobState.PENDING: "PENDING",
    JobState.ACTIVE: "PENDING",
    JobState.RETRY_SCHEDULED: "RETRY",
    JobState.COMPLETED: "DONE",
    JobState.DEAD_LETTER: "FAILED",
    JobState.CANCELLED: "FAILED",
}


def retries_left(max_attempts: int, attempts: int, state: JobState) -> int:
    """The exercise's ``retries_left``: retries not yet scheduled.

    Conveyor counts runs (``attempts``; ``max_attempts = max_reintentos + 1``). The exercise
    spends a retry when it schedules one, so a job waiting in ``retry_scheduled`` has already
    used the retry it is waiting for.
    """
    reruns_started = max(0, attempts - 1)
    waiting = 1 if state is JobState.RETRY_SCHEDULED else 0
    return (max_attempts - 1) - reruns_started - waiting


class TaskQueue:
    """The exercise's API as a thin veneer over one Conveyor app (for side-by-side reading)."""

    def __init__(
        self,
        max_reintentos: int = 3,
        delay_inicial: float = 0.1,
        factor: float = 2.0,
        clock: FakeClock | None = None,
    ) -> None:
        self.clock = clock or FakeClock(0.0)
        self.app = Conveyor("memory://", clock=self.clock, rng=random.Random(0))
        self.max_reintentos = max_reintentos
        self.backoff = Backoff.exponential(base=delay_inicial, factor=factor, jitter=0.0)
        self.worker = self.app.worker()
        self._tasks: dict[tuple[Callable[[], Any], tuple[type[BaseException], ...]], Task] = {}

    def enqueue(
        self,
        func: Callable[[], Any],
        *,
        task_id: str | None = None,
        excepciones: tuple[type[BaseException], ...] = (Exception,),
    ) -> str:
        """Register ``func`` (once per retry policy) and enqueue one run of it."""
        task = self._tasks.get((func, excepciones))
        if task is None:
            label = getattr(func, "__name__", "")
            label = label if label.isidentifier() else "func"  # e.g. "<lambda>"
            task = self.app.task(
                func,
                name=f"{label}_{len(self._tasks) + 1}",
                max_retries=self.max_reintentos,
                backoff=self.backoff,
                retry_on=excepciones,
            )
            self._tasks[(func, excepciones)] = task
        opts = {"job_id": task_id} if task_id else {}
        return task.options(**opts).enqueue().id

    def tick(self) -> bool:
        """One worker step at the clock's current time; True if a task ran."""
        return self.worker.process_next()

    def status(self, task_id: str) -> dict[str, Any]:
        """The exercise's status dict, read from Conveyor's job record."""
        job = self.app.get_job(task_id)
        return {
            "task_id": job.id,
            "state": SEED_STATE[job.state],
            "conveyor_state": str(job.state),
            "attempts": job.attempts,
            "retries_left": retries_left(job.max_attempts, job.attempts, job.state),
            "next_run_at": job.run_at if job.state is JobState.RETRY_SCHEDULED else None,
            "last_error": job.last_error,
        }

    def metrics(self) -> dict[str, int]:
        """The exercise's metrics, from ``app.stats()`` counts."""
        counts = self.app.stats()["queues"].get("default", {})
        states = [str(s) for s in JobState]
        return {
            "pending": counts.get("pending", 0) + counts.get("scheduled", 0),
            "retry": counts.get("retry_scheduled", 0),
            "done": counts.get("completed", 0),
            "failed": counts.get("dead_letter", 0),
            "total": sum(counts.get(s, 0) for s in states),
        }


def case_tarea_ok() -> dict[str, Any]:
    """A task that succeeds: DONE after one tick, attempts 1, called once."""
    q = TaskQueue(max_reintentos=3, delay_inicial=1.0, factor=2.0)
    calls: list[float] = []

    def ok() -> None:
        calls.append(q.clock.now())

    tid = q.enqueue(ok, excepciones=(ValueError,))
    q.tick()
    return {"status": q.status(tid), "calls": len(calls)}


def case_reintentos_con_backoff() -> dict[str, Any]:
    """Fails twice, then succeeds: retries at t=1 (delay 1) and t=3 (delay 1*2)."""
    q = TaskQueue(max_reintentos=2, delay_inicial=1.0, factor=2.0)
    calls: list[float] = []

    def falla_dos_y_luego_ok() -> None:
        calls.append(q.clock.now())
        if len(calls) <= 2:
            raise ValueError("temporal")

    tid = q.enqueue(falla_dos_y_luego_ok, excepciones=(ValueError,))
    steps = []
    q.tick()
    steps.append(("tick at t=0", q.status(tid)))
    ran_early = q.tick()  # same time: not due yet
    steps.append(("tick at t=0 again", q.status(tid)))
    q.clock.advance(1.0)
    q.tick()
    steps.append(("tick at t=1", q.status(tid)))
    q.clock.advance(2.0)
    q.tick()
    steps.append(("tick at t=3", q.status(tid)))
    return {"steps": steps, "ran_early": ran_early, "call_times": calls}


def case_agota_reintentos_y_falla() -> dict[str, Any]:
    """max_reintentos=1 and it always fails: RETRY, then FAILED (dead_letter)."""
    q = TaskQueue(max_reintentos=1, delay_inicial=1.0, factor=2.0)

    def siempre_falla() -> None:
        raise ValueError("siempre")

    tid = q.enqueue(siempre_falla, excepciones=(ValueError,))
    q.tick()
    first = q.status(tid)
    q.clock.advance(1.0)
    q.tick()
    final = q.status(tid)
    q.clock.advance(1_000.0)
    rerun = q.tick()
    job = q.app.get_job(tid)
    dead = [d.id for d in q.app.dead_letters()]
    return {
        "first": first,
        "final": final,
        "rerun": rerun,
        "dead_letters": dead,
        "errors": len(job.errors),
    }


def case_excepcion_no_reintentable_falla_directo() -> dict[str, Any]:
    """KeyError is not in excepciones=(ValueError,): FAILED at once, attempts 1."""
    q = TaskQueue(max_reintentos=3, delay_inicial=1.0, factor=2.0)

    def lanza_keyerror() -> None:
        raise KeyError("no reintentable")

    tid = q.enqueue(lanza_keyerror, excepciones=(ValueError,))
    q.tick()
    job = q.app.get_job(tid)
    return {"status": q.status(tid), "error_kind": job.errors[-1]["kind"]}


def case_metrics() -> dict[str, Any]:
    """No retries: task "a" succeeds, task "b" fails -> done 1, failed 1, total 2."""
    q = TaskQueue(max_reintentos=0, delay_inicial=0.0, factor=2.0)

    def a() -> None:
        return None

    def b() -> None:
        raise ValueError("x")

    q.enqueue(a, task_id="a")
    q.enqueue(b, task_id="b", excepciones=(ValueError,))
    before = q.metrics()
    q.tick()
    q.tick()
    return {"before": before, "metrics": q.metrics(), "a": q.status("a"), "b": q.status("b")}


def fifo_respecting_next_run_at() -> dict[str, Any]:
    """Insertion order, except that a task waiting for its retry is skipped until due."""
    q = TaskQueue(max_reintentos=3, delay_inicial=1.0, factor=2.0)
    order: list[tuple[str, float]] = []
    failed_once: set[str] = set()

    def make(label: str, fail_first: bool) -> Callable[[], None]:
        def run() -> None:
            order.append((label, q.clock.now()))
            if fail_first and label not in failed_once:
                failed_once.add(label)
                raise ValueError(f"{label} first try")

        run.__name__ = label
        return run

    for label, fail_first in (("t1", True), ("t2", False), ("t3", False)):
        q.enqueue(make(label, fail_first), task_id=label, excepciones=(ValueError,))
    ticks = []
    for _ in range(4):
        ticks.append((q.clock.now(), q.tick()))
    q.clock.advance(1.0)
    ticks.append((q.clock.now(), q.tick()))
    return {"order": order, "ticks": ticks, "metrics": q.metrics()}


def run_scenario() -> dict[str, dict[str, Any]]:
    """The exercise's five tests plus its FIFO rule; returns what was observed in each."""
    return {
        "tarea_ok": case_tarea_ok(),
        "reintentos_con_backoff": case_reintentos_con_backoff(),
        "agota_reintentos": case_agota_reintentos_y_falla(),
        "no_reintentable": case_excepcion_no_reintentable_falla_directo(),
        "metrics": case_metrics(),
        "fifo": fifo_respecting_next_run_at(),
    }


def _fmt(st: dict[str, Any]) -> str:
    nxt = "" if st["next_run_at"] is None else f", next_run_at={st['next_run_at']:g}"
    err = f", last_error={st['last_error']!r}" if st["last_error"] else ""
    return (
        f"{st['state']} ({st['conveyor_state']}), attempts={st['attempts']}, "
        f"retries_left={st['retries_left']}{nxt}{err}"
    )


def main() -> None:
    # The worker logs every failed attempt; this narrative reports them itself.
    logging.getLogger("conveyor").setLevel(logging.ERROR)
    f = run_scenario()
    print("Seed 001 (Reto #29): TaskQueue with retries and exponential backoff, on Conveyor")
    print("(memory://, FakeClock, Backoff.exponential(base=delay_inicial, factor, jitter=0))")

    print("\ntest_tarea_ok: one tick")
    print(f"  {_fmt(f['tarea_ok']['status'])}; function called {f['tarea_ok']['calls']} time(s)")

    print("\ntest_reintentos_con_backoff: max_reintentos=2, delay_inicial=1, factor=2")
    for label, st in f["reintentos_con_backoff"]["steps"]:
        print(f"  {label}: {_fmt(st)}")
    times = ", ".join(f"{t:g}" for t in f["reintentos_con_backoff"]["call_times"])
    print(f"  the function ran at t = {times} (waits of 1 s, then 2 s)")

    ag = f["agota_reintentos"]
    print("\ntest_agota_reintentos_y_falla: max_reintentos=1, always ValueError")
    print(f"  after tick 1: {_fmt(ag['first'])}")
    print(f"  after tick 2: {_fmt(ag['final'])}")
    print(f"  a later tick runs it again? {ag['rerun']}; dead letters: {ag['dead_letters']}")

    nr = f["no_reintentable"]
    print("\ntest_excepcion_no_reintentable_falla_directo: KeyError, excepciones=(ValueError,)")
    print(f"  {_fmt(nr['status'])}; error kind {nr['error_kind']!r}")

    m = f["metrics"]
    print("\ntest_metrics: max_reintentos=0; 'a' succeeds, 'b' raises ValueError")
    print(f"  before: {m['before']}")
    print(f"  after two ticks: {m['metrics']}")

    fifo = f["fifo"]
    print("\nFIFO that respects next_run_at: t1 fails once, t2 and t3 succeed")
    for t, ran in fifo["ticks"]:
        print(f"  tick at t={t:g} -> {'ran' if ran else 'nothing due'}")
    print("  run order: " + ", ".join(f"{label}@{t:g}" for label, t in fifo["order"]))


if __name__ == "__main__":
    main()
