"""Results that cannot be stored (issue 13, defect 6 and hostile item 3), with a real worker.

A handler's return value that is not JSON, nests too deep, holds a lone surrogate or is over
``max_result_bytes`` must not stall the worker or touch other jobs: the job is completed
WITHOUT its result (its work happened; it must never run again) and a ``result_error`` entry
in its errors says why. Good jobs of the same batch complete exactly once.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

from conveyor import Conveyor, JobState
from conveyor.broker.base import Broker
from conveyor.config import Settings
from tests.support.hostile import UNENCODABLE
from tests.worker.conftest import FAST, running, wait_until

BIG = 2 * 1024 * 1024  # over the default 1 MiB result cap


def make_app(broker: Broker, **settings: Any) -> Conveyor:
    """A live app (real clock) whose worker must record within a short lease."""
    return Conveyor(
        broker,
        settings=Settings(**{**FAST, "visibility_timeout": 3.0, **settings}),
        rng=random.Random(1),
    )


def test_unstorable_results_touch_only_their_own_job(broker: Broker) -> None:
    app = make_app(broker)
    runs: Counter[str] = Counter()
    lock = threading.Lock()

    @app.task
    def good(i: int) -> dict[str, int]:
        with lock:
            runs[f"good-{i}"] += 1
        return {"i": i}

    @app.task
    def bad(name: str) -> Any:
        with lock:
            runs[name] += 1
        return "x" * BIG if name == "too_big" else UNENCODABLE[name]

    names = [*UNENCODABLE, "too_big"]
    jobs: list[Any] = []
    for n, name in enumerate(names):  # bad results in the middle of batches of good ones
        jobs += [good.enqueue(n * 10 + k) for k in range(5)]
        jobs.append(bad.enqueue(name))
    jobs += [good.enqueue(1000 + k) for k in range(5)]
    started = time.monotonic()
    with running(app, concurrency=8):
        wait_until(
            lambda: all(s == "completed" for s in (str(j.refresh().state) for j in jobs)),
            timeout=20,
        )
        time.sleep(0.5)  # anything redelivered would run again now
    assert time.monotonic() - started < 20
    assert all(count == 1 for count in runs.values()), runs
    assert len(runs) == len(jobs)
    for job in jobs:
        job.refresh()
        assert job.attempts == 1 and job.lost == 0, (job.task, job.args, job.errors)
        if job.task == "good":
            assert job.result == {"i": job.args[0]} and job.errors == []
        else:
            assert job.state is JobState.COMPLETED and job.result is None
            assert [e["kind"] for e in job.errors] == ["result_error"], job.errors
            assert job.errors[0]["message"].startswith("result"), job.errors
            assert job.last_error and "result" in job.last_error
    big = next(j for j in jobs if j.args == ["too_big"])
    assert "limit is 1048576 bytes" in big.errors[0]["message"]
    stored = app.get_job(big.id)  # get_job() shows the note too
    assert stored.state is JobState.COMPLETED and stored.errors[0]["kind"] == "result_error"


def test_result_cap_is_a_setting(broker: Broker) -> None:
    app = make_app(broker, max_result_bytes=100)

    @app.task
    def echo(text: str) -> str:
        return text

    small, large = echo.enqueue("x" * 50), echo.enqueue("y" * 200)
    with running(app, concurrency=2):
        wait_until(
            lambda: all(j.refresh().state is JobState.COMPLETED for j in (small, large)), timeout=10
        )
    assert small.refresh().result == "x" * 50 and small.errors == []
    large.refresh()
    assert large.result is None and "the limit is 100 bytes" in large.errors[0]["message"]


def test_error_message_with_a_lone_surrogate_is_stored(broker: Broker) -> None:
    """A failure whose message cannot be encoded is still recorded (escaped), not retried."""
    app = make_app(broker)

    @app.task(max_attempts=1)
    def listdir() -> None:
        raise FileNotFoundError(UNENCODABLE["lone_surrogate"])

    job = listdir.enqueue()
    with running(app, concurrency=2):
        wait_until(lambda: job.refresh().state is JobState.DEAD_LETTER, timeout=10)
    assert "name-\\udcff.txt" in job.errors[-1]["message"]


def test_a_broker_refusal_is_split_to_the_job_that_caused_it(
    broker: Broker, monkeypatch: Any
) -> None:
    """Defence in depth: if a result the check let through still makes ``complete`` raise a
    deterministic error, the batch is split, never retried as a whole, and only that job is
    completed without its result."""
    if type(broker).__name__ == "MemoryBroker":  # stores Python objects: nothing to refuse
        return
    import conveyor.worker.recorder as recorder

    monkeypatch.setattr(recorder, "result_problem", lambda result, limit: None)
    app = make_app(broker)
    runs: Counter[str] = Counter()

    @app.task
    def echo(i: int) -> Any:
        runs[str(i)] += 1
        return UNENCODABLE["lone_surrogate"] if i == 3 else i

    jobs = [echo.enqueue(i) for i in range(8)]
    with running(app, concurrency=8):
        wait_until(lambda: all(j.refresh().state is JobState.COMPLETED for j in jobs), timeout=15)
        time.sleep(0.3)
    assert all(count == 1 for count in runs.values()) and len(runs) == 8, runs
    for i, job in enumerate(jobs):
        job.refresh()
        if i == 3:
            assert job.result is None and job.errors[0]["kind"] == "result_error", job.errors
        else:
            assert job.result == i and job.errors == []
