"""``app.worker(...)`` refuses bad options with a ValidationError naming the option, as the
CLI (``conveyor worker``) does: they were silently clamped or taken as given (a NaN or
negative lease, a drain that never waits, a worker recycled after its first job)."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, ValidationError
from conveyor.broker.memory import MemoryBroker


@pytest.fixture
def app() -> Conveyor:
    """Options are checked before any broker call: one backend is enough."""
    return Conveyor(MemoryBroker())


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": -3}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"concurrency": "8"}, "concurrency"),
        ({"processes": 0}, "processes"),
        ({"visibility_timeout": float("nan")}, "visibility_timeout"),
        ({"visibility_timeout": -5}, "visibility_timeout"),
        ({"visibility_timeout": float("inf")}, "visibility_timeout"),
        ({"shutdown_timeout": float("nan")}, "shutdown_timeout"),
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"max_jobs": -1}, "max_jobs"),
        ({"max_jobs": 2.5}, "max_jobs"),
        ({"max_lost": -1}, "max_lost"),
        ({"process_pool_size": -2}, "process_pool_size"),
        # finite, but beyond MAX_DELAY: Event.wait(1e99) raises OverflowError (the lease
        # keeper's thread died at its first wait; a stop never drained)
        ({"visibility_timeout": 1e99}, "visibility_timeout"),
        ({"shutdown_timeout": 1e99}, "shutdown_timeout"),
    ],
)
def test_bad_worker_options_are_refused_by_name(
    app: Conveyor, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError, match=rf"^{field}: must be"):
        app.worker(**options)


def test_good_worker_options_are_kept(app: Conveyor) -> None:
    worker = app.worker(
        concurrency=3, visibility_timeout=0.5, shutdown_timeout=0, max_jobs=10, max_lost=2
    )
    assert (worker.concurrency, worker.visibility_timeout, worker.shutdown_timeout) == (3, 0.5, 0)
    assert (worker.max_jobs, worker.max_lost) == (10, 2)
    unset = app.worker(max_jobs=0, max_lost=0, process_pool_size=0)  # 0: the default, as before
    assert unset.max_lost == app.settings.max_lost and unset.process_pool_size >= 1


@pytest.mark.parametrize("bad", [float("nan"), -1, float("inf"), "5", True, 1e99])
def test_stop_refuses_a_bad_timeout_and_the_worker_keeps_running(app: Conveyor, bad: Any) -> None:
    """``worker.stop(timeout="5")`` stored the string as the drain budget before raising a
    TypeError, so the run thread's own drain then failed too (its jobs never released); NaN
    or infinity made the drain wait for ever."""
    from tests.worker.conftest import running, wait_until

    done: list[str] = []

    @app.task
    def quick(tag: str) -> None:
        done.append(tag)

    with running(app, shutdown_timeout=2.0) as worker:
        with pytest.raises(ValidationError, match=r"^timeout: "):
            worker.stop(timeout=bad)
        assert not worker.draining and worker.shutdown_timeout == 2.0
        quick.enqueue("after")
        wait_until(lambda: done == ["after"], 5)


@pytest.mark.parametrize("bad", [[1], 5, ["high", None], [b"high"]])
def test_queues_that_are_not_strings_are_refused_by_name(app: Conveyor, bad: Any) -> None:
    """``queues=[1]`` was an AttributeError, ``queues=5`` a TypeError."""
    with pytest.raises(ValidationError, match=r"^queues: "):
        app.worker(queues=bad)


@pytest.mark.parametrize("bad", ["", "a\nforged: line", "\x1b[31mred", 5, "w" * 201, "a\udcffb"])
def test_a_worker_id_is_checked(app: Conveyor, bad: Any) -> None:
    """``worker_id=`` was taken as given: it is printed raw in every job's outcome line
    (a newline forged log lines), stored on each job it claims and in its heartbeat record."""
    with pytest.raises(ValidationError, match=r"^worker_id: "):
        app.worker(worker_id=bad)
    assert app.worker(worker_id="host-1:worker.7").id == "host-1:worker.7"


@pytest.mark.parametrize("bad", ["group=", "group=host:1:2", "group=anything"])
def test_a_worker_id_in_the_group_namespace_is_refused(app: Conveyor, bad: str) -> None:
    """A worker's control flag is the document named by its id and a group's is ``group=<name>``
    (``control.group_key``): a worker named ``group=G`` read group G's flag as its own, and a
    command sent to it alone reached every process of group G."""
    with pytest.raises(ValidationError, match=r"^worker_id: .*group="):
        app.worker(worker_id=bad)
    assert app.worker(worker_id="groupie=1").id == "groupie=1"
    assert app.worker(worker_id="Group=1").id == "Group=1"
