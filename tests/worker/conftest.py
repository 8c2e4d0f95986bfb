"""Fixtures for worker tests: live apps (real clock) on every backend, a worker in a thread."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker.base import Broker
from conveyor.config import Settings
from conveyor.worker.loop import Worker
from tests.support.backends import BACKENDS

FAST = {
    "poll_interval": 0.05,
    "heartbeat_interval": 0.5,
    "reap_interval": 0.2,
    "timeout_grace": 0.5,
    "shutdown_timeout": 5.0,
}


def wait_until(pred: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Poll ``pred`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


@pytest.fixture
def live_app(broker: Broker) -> Conveyor:
    """An app on each backend with the real clock and short intervals."""
    return Conveyor(broker, settings=Settings(**FAST), rng=random.Random(1))  # type: ignore[arg-type]


@contextmanager
def running(app: Conveyor, **options: Any) -> Iterator[Worker]:
    """Run a worker in a thread for the block; stop it (draining) afterwards."""
    options.setdefault("handle_signals", False)
    worker = app.worker(options.pop("queues", None), **options)
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.update(code=worker.run()), daemon=True)
    thread.start()
    wait_until(lambda: worker.started_at is not None)
    try:
        yield worker
    finally:
        worker.stop(timeout=options.get("shutdown_timeout", 5.0))
        thread.join(15)
        assert not thread.is_alive(), "worker.run() did not return"
    worker.returned = result.get("code")  # type: ignore[attr-defined]


def states(app: Conveyor, jobs: list[Any]) -> list[str]:
    """The current state of each job handle."""
    return [str(j.refresh().state) for j in jobs]


# ---------------------------------------------------------------------- real processes
SHARED = [name for name in ("sqlite", "redis", "postgres") if name in BACKENDS]


@pytest.fixture(params=SHARED)
def shared_url(request: Any, tmp_path: Path) -> str:
    """A broker URL several processes can share (a flushed Redis database; a new PostgreSQL
    database, so no process of an earlier test can touch this test's jobs)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").new_database())
    server = request.getfixturevalue("redis_server")
    admin = Conveyor(server.url)
    admin.broker.flush_all()
    admin.close()
    return str(server.url)


@pytest.fixture
def env(shared_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The test's app (to enqueue and inspect), its marks, and a worker factory."""
    from tests.worker.harness import Marks, WorkerProcess

    app = Conveyor(shared_url, settings=Settings(heartbeat_interval=0.5))
    started: list[WorkerProcess] = []

    def worker(*args: str, command: list[str] | None = None, **extra_env: str) -> WorkerProcess:
        proc = WorkerProcess(shared_url, tmp_path, *args, env=extra_env, command=command)
        started.append(proc)
        return proc

    yield {"app": app, "marks": Marks(tmp_path / "marks.jsonl"), "worker": worker}
    for proc in started:
        proc.close()
    app.close()
