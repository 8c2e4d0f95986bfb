"""Seed 000, "Build a Background Job Processor with Retries", done with Conveyor.

The exercise is a state machine driven by ``processor.process_next(now)``: successes finalise,
transient failures retry after ``retry_delay_seconds``, ``PermanentError`` goes straight to
``dead_letter``, and a job that is ``succeeded`` or ``dead_letter`` never runs again.

Conveyor already is that machine. The mapping:

    QueueStore.enqueue(job_type, payload)  ->  app.enqueue(job_type, args=[payload])
    processor.register(job_type, handler)  ->  @app.task(name=job_type, ...)
    max_retries=3, retry_delay_seconds=5   ->  @app.task(max_retries=3, backoff=Backoff.fixed(5))
    PermanentError                         ->  conveyor.PermanentError
    processor.process_next(now)            ->  worker.process_next(now)
    states pending/succeeded/dead_letter   ->  pending|retry_scheduled / completed / dead_letter

Everything runs on ``memory://`` with a ``FakeClock``: no sleeping, the same result every run.
Run it: ``python tests/seeds/seed000_state_machine.py``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sized
from typing import TYPE_CHECKING, Any

from conveyor import Backoff, Conveyor, FakeClock, JobState, PermanentError

if TYPE_CHECKING:
    from conveyor.worker.loop import Worker

MAX_RETRIES = 3  # Example 2 of the exercise
RETRY_DELAY_SECONDS = 5.0
LATER = 10_000.0  # "much later": used to show that finished jobs never run again

# The exercise's three states, as Conveyor's states map onto them.
SEED_STATE = {
    JobState.SCHEDULED: "pending",
    JobState.PENDING: "pending",
    JobState.RETRY_SCHEDULED: "pending",  # waiting for next_attempt_at
    JobState.ACTIVE: "pending",
    JobState.COMPLETED: "succeeded",
    JobState.DEAD_LETTER: "dead_letter",
    JobState.CANCELLED: "dead_letter",
}


class TransientError(Exception):
    """A flaky API call or a timeout: worth retrying."""


def _app() -> tuple[Conveyor, FakeClock]:
    clock = FakeClock(0.0)
    return Conveyor("memory://", clock=clock, rng=random.Random(0)), clock


def _step(worker: Worker, clock: FakeClock, now: float, returns: list[tuple[float, bool]]) -> bool:
    """``processor.process_next(now)``; the fake clock follows so handlers see the same time."""
    clock.set(now)
    ran = worker.process_next(now=now)
    returns.append((now, ran))
    return ran


def _register(app: Conveyor, job_type: str, handler: Any) -> None:
    """``processor.register(job_type, handler)``: a task named after the job type."""
    app.task(name=job_type, max_retries=MAX_RETRIES, backoff=Backoff.fixed(RETRY_DELAY_SECONDS))(
        handler
    )


def _facts(
    app: Conveyor, worker: Worker, job_id: str, returns: list[tuple[float, bool]], calls: Sized
) -> dict[str, Any]:
    """What the exercise's tests look at, then proof that a finished job never runs again."""
    job = app.get_job(job_id)
    calls_before = len(calls)
    # Never re-run: a finished job is invisible to process_next, however late it is asked.
    rerun = worker.process_next(now=LATER)
    return {
        "job_id": job_id,
        "returns": returns,
        "state": str(job.state),
        "seed_state": SEED_STATE[job.state],
        "attempts": job.attempts,
        "last_error": job.last_error,
        "errors": [(e["attempt"], e["kind"], e["message"]) for e in job.errors],
        "calls": calls_before,
        "rerun_returned": rerun,
        "calls_after_rerun": len(calls),
        "state_after_rerun": str(app.get_job(job_id).state),
    }


def example_1_success() -> dict[str, Any]:
    """enqueue('send_email', {'to': 'a@x.com'}); no-op handler; process_next(now=0)."""
    app, clock = _app()
    calls: list[dict[str, Any]] = []
    _register(app, "send_email", lambda payload: calls.append(payload))
    job = app.enqueue("send_email", args=[{"to": "a@x.com"}])
    worker = app.worker()
    returns: list[tuple[float, bool]] = []
    _step(worker, clock, 0, returns)
    facts = _facts(app, worker, job.id, returns, calls)
    facts["payload_seen"] = calls[0] if calls else None
    return facts


def example_2_transient_then_success() -> dict[str, Any]:
    """TransientError on the first call, success on the second; max_retries=3, delay 5 s."""
    app, clock = _app()
    calls: list[float] = []

    def flaky(payload: dict[str, Any]) -> None:
        calls.append(app.now())
        if len(calls) == 1:
            raise TransientError("smtp timeout")

    _register(app, "send_email", flaky)
    job = app.enqueue("send_email", args=[{"to": "b@x.com"}])
    worker = app.worker()
    returns: list[tuple[float, bool]] = []
    _step(worker, clock, 0, returns)
    after_first = app.get_job(job.id)
    _step(worker, clock, 4, returns)  # not yet runnable
    _step(worker, clock, 5, returns)  # the retry
    facts = _facts(app, worker, job.id, returns, calls)
    facts["after_first"] = {
        "state": str(after_first.state),
        "attempts": after_first.attempts,
        "next_attempt_at": after_first.run_at,
    }
    return facts


def example_3_permanent_error() -> dict[str, Any]:
    """PermanentError on the first call: dead_letter at once, retries notwithstanding."""
    app, clock = _app()
    calls: list[int] = []

    def bad_payload(payload: dict[str, Any]) -> None:
        calls.append(1)
        raise PermanentError("invalid recipient address 'nobody@'")

    _register(app, "send_email", bad_payload)
    job = app.enqueue("send_email", args=[{"to": "nobody@"}])
    worker = app.worker()
    returns: list[tuple[float, bool]] = []
    _step(worker, clock, 0, returns)
    facts = _facts(app, worker, job.id, returns, calls)
    return facts


def retries_exhausted() -> dict[str, Any]:
    """Always transient: after max_retries retries the next failure is a dead letter."""
    app, clock = _app()
    calls: list[float] = []

    def always_flaky(payload: dict[str, Any]) -> None:
        calls.append(app.now())
        raise TransientError("upstream 503")

    _register(app, "send_email", always_flaky)
    job = app.enqueue("send_email", args=[{"to": "c@x.com"}])
    worker = app.worker()
    returns: list[tuple[float, bool]] = []
    t = 0.0
    while _step(worker, clock, t, returns):
        t += RETRY_DELAY_SECONDS
    facts = _facts(app, worker, job.id, returns, calls)
    facts["call_times"] = calls
    return facts


def run_scenario() -> dict[str, dict[str, Any]]:
    """Every case of the exercise; returns the observed facts per case."""
    return {
        "example_1": example_1_success(),
        "example_2": example_2_transient_then_success(),
        "example_3": example_3_permanent_error(),
        "exhausted": retries_exhausted(),
    }


def _describe(title: str, facts: dict[str, Any], notes: dict[float, str] | None = None) -> None:
    print(f"\n{title}")
    for t, ran in facts["returns"]:
        note = (notes or {}).get(t)
        print(f"  process_next(now={t:g}) -> {ran}" + (f"   # {note}" if note else ""))
    print(
        f"  final state: {facts['state']} (exercise: {facts['seed_state']!r}), "
        f"attempts={facts['attempts']}, handler calls={facts['calls']}"
    )
    for attempt, kind, message in facts["errors"]:
        print(f"  attempt {attempt} failed ({kind}): {message}")
    print(
        f"  process_next(now={LATER:g}) afterwards -> {facts['rerun_returned']} "
        f"(finished jobs never run again; calls still {facts['calls_after_rerun']})"
    )


def main() -> None:
    # The worker logs every failed attempt; this narrative reports them itself.
    logging.getLogger("conveyor").setLevel(logging.ERROR)
    facts = run_scenario()
    print(
        "Seed 000: a background job processor with retries, on Conveyor "
        f"(memory://, FakeClock, max_retries={MAX_RETRIES}, fixed delay "
        f"{RETRY_DELAY_SECONDS:g} s)"
    )
    _describe("Example 1: the handler returns normally", facts["example_1"])
    ex2 = facts["example_2"]
    first = ex2["after_first"]
    _describe(
        "Example 2: TransientError once, then success",
        ex2,
        {
            0: f"failed -> {first['state']}, next attempt at t={first['next_attempt_at']:g}",
            4: "not runnable yet",
            5: "the retry succeeds",
        },
    )
    _describe("Example 3: PermanentError on the first call", facts["example_3"])
    ex4 = facts["exhausted"]
    _describe("Retry cap: a handler that always fails transiently", ex4)
    print(
        f"  runs at t={', '.join(f'{t:g}' for t in ex4['call_times'])}: "
        f"1 run + {MAX_RETRIES} retries, then dead_letter"
    )


if __name__ == "__main__":
    main()
