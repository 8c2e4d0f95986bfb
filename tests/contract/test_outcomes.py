"""Contract: success, retries at exact backoff times, permanent failures, attempts limits."""

from __future__ import annotations

import random

import pytest

from conveyor import Backoff, Conveyor, ErrorKind, FakeClock, JobState, PermanentError, Retry
from conveyor.broker.base import Broker


def make_app(broker: Broker, clock: FakeClock) -> Conveyor:
    return Conveyor(broker, clock=clock, rng=random.Random(7))


def test_success_stores_result(app: Conveyor) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    job = add.enqueue(2, b=3)
    assert app.worker().process_next()
    job.refresh()
    assert (job.state, job.result, job.attempts) == (JobState.COMPLETED, 5, 1)
    assert job.finished_at == app.now() and job.started_at == app.now()


def test_retries_at_exact_backoff_times(broker: Broker, clock: FakeClock) -> None:
    app = make_app(broker, clock)
    expected_rng = random.Random(7)

    @app.task(max_attempts=4, backoff=Backoff.exponential(base=2, factor=3, max=100, jitter=0.1))
    def flaky() -> None:
        raise ValueError("down")

    job = flaky.enqueue()
    worker = app.worker()
    for attempt in (1, 2, 3):
        assert worker.process_next()
        job.refresh()
        delay = min(100, 2 * 3 ** (attempt - 1)) * expected_rng.uniform(0.9, 1.1)
        assert job.state is JobState.RETRY_SCHEDULED
        assert job.run_at == pytest.approx(clock.now() + delay, abs=1e-6)
        clock.set(job.run_at - 0.001)
        assert not worker.process_next(), "must not run before its retry time"
        clock.set(job.run_at)
    assert worker.process_next()
    job.refresh()
    assert job.state is JobState.DEAD_LETTER and job.attempts == 4
    assert [e["attempt"] for e in job.errors] == [1, 2, 3, 4]
    assert all(e["kind"] == "error" and e["type"] == "ValueError" for e in job.errors)
    assert job.last_error == "ValueError: down"


def test_permanent_error_goes_straight_to_dead_letter(app: Conveyor) -> None:
    @app.task(max_attempts=5)
    def bad() -> None:
        raise PermanentError("invalid card")

    job = bad.enqueue()
    app.worker().run_until_idle()
    job.refresh()
    assert job.state is JobState.DEAD_LETTER and job.attempts == 1
    assert job.errors[-1]["kind"] == ErrorKind.PERMANENT and "invalid card" in job.last_error


def test_retry_on_and_dead_on(app: Conveyor, clock: FakeClock) -> None:
    @app.task(retry_on=(ConnectionError,), dead_on=(KeyError,), max_attempts=3)
    def t(kind: str) -> None:
        raise {"conn": ConnectionError("x"), "key": KeyError("y"), "other": ValueError("z")}[kind]

    conn, key, other = t.enqueue("conn"), t.enqueue("key"), t.enqueue("other")
    app.worker().run_until_idle()
    assert conn.refresh().state is JobState.RETRY_SCHEDULED
    assert key.refresh().state is JobState.DEAD_LETTER
    assert other.refresh().state is JobState.DEAD_LETTER  # outside retry_on: permanent
    assert other.errors[-1]["kind"] == "permanent"


def test_retry_exception_sets_delay_and_counts(app: Conveyor, clock: FakeClock) -> None:
    @app.task(max_attempts=3)
    def later() -> None:
        raise Retry(delay=42)

    job = later.enqueue()
    app.worker().process_next()
    job.refresh()
    assert job.state is JobState.RETRY_SCHEDULED and job.run_at == clock.now() + 42
    assert job.attempts == 1 and job.errors[-1]["kind"] == "retry"


@pytest.mark.parametrize(
    ("options", "runs"),
    [({"max_attempts": 1}, 1), ({"max_retries": 2}, 3), ({"max_retries": 0}, 1), ({}, 4)],
)
def test_max_attempts_and_max_retries(
    app: Conveyor, clock: FakeClock, options: dict[str, int], runs: int
) -> None:
    calls = []

    @app.task(backoff=Backoff.fixed(1))
    def fails() -> None:
        calls.append(1)
        raise ValueError

    job = fails.options(**options).enqueue()
    worker = app.worker()
    for _ in range(10):
        worker.run_until_idle()
        clock.advance(5)
    assert len(calls) == runs and job.refresh().state is JobState.DEAD_LETTER


def test_task_level_max_retries(app: Conveyor) -> None:
    @app.task(max_retries=0)
    def once() -> None:
        raise ValueError

    assert once.max_attempts == 1


def test_unknown_task_dead_letters_and_worker_keeps_running(app: Conveyor) -> None:
    @app.task
    def known() -> str:
        return "ok"

    other = Conveyor(app.broker, clock=app.clock)  # a producer that only knows names
    ghost = other.enqueue("not_registered_here")
    good = known.enqueue()
    assert app.worker().run_until_idle() == 2
    assert ghost.refresh().state is JobState.DEAD_LETTER
    assert ghost.errors[-1]["kind"] == "unknown_task"
    assert good.refresh().state is JobState.COMPLETED


def test_arguments_that_do_not_fit_the_signature(app: Conveyor) -> None:
    @app.task(max_attempts=5)
    def one(a: int) -> int:
        return a

    other = Conveyor(app.broker, clock=app.clock)  # enqueue refuses it; another producer may not
    job = other.enqueue("one", args=[1, 2])
    app.worker().run_until_idle()
    assert job.refresh().state is JobState.DEAD_LETTER
    assert job.errors[-1]["kind"] == "bad_arguments" and job.attempts == 1


def test_async_task_runs_inline(app: Conveyor) -> None:
    @app.task
    async def coro(x: int) -> int:
        return x * 2

    job = coro.enqueue(21)
    app.worker().run_until_idle()
    assert job.refresh().result == 42


def test_unserialisable_result_completes_without_it(app: Conveyor) -> None:
    """The work happened: the job is completed (never re-run) and the dropped result noted."""

    @app.task
    def weird() -> object:
        return object()

    job = weird.enqueue()
    assert app.worker().run_until_idle() == 1
    job.refresh()
    assert (job.state, job.result, job.attempts) == (JobState.COMPLETED, None, 1)
    assert job.errors[-1]["kind"] == "result_error" and "object" in job.errors[-1]["message"]
    assert job.last_error is not None and job.last_error.startswith("ValidationError: result")
    assert app.worker().run_until_idle() == 0


def test_complete_with_an_error_entry(app: Conveyor) -> None:
    """``Ack.error``: the completion appends the entry and sets last_error, atomically."""
    from conveyor.broker.base import Ack

    job = app.enqueue("t")
    lease = app.broker.claim(["default"], app.now(), limit=1, worker_id="w")[0]
    note = {
        "kind": "result_error",
        "type": "ValidationError",
        "message": "result: too big",
        "traceback": "",
        "worker": "w",
        "at": app.now(),
    }
    assert app.broker.complete([Ack(job.id, lease.token, None, "default", note)], app.now())
    job.refresh()
    assert job.state is JobState.COMPLETED and job.result is None
    assert job.errors == [{**note, "attempt": 1}]
    assert job.last_error == "ValidationError: result: too big"
