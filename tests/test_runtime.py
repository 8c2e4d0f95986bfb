"""The runtime below the facade: processes run on a ``Runtime`` alone, and the app shares its own.

``tests/test_architecture.py`` proves the processes never import ``conveyor.app``; these tests
prove they need nothing of it at run time either: a worker, a scheduler, the inspector, the
operator actions and the alert manager all work on a bare ``Runtime`` over a real broker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.broker.factory import broker_from_url
from conveyor.config import Settings
from conveyor.core.clock import FakeClock
from conveyor.core.state import JobState
from conveyor.monitoring.actions import AUDIT_LOG, Operator
from conveyor.monitoring.alerts import AlertManager
from conveyor.monitoring.inspect import Inspector
from conveyor.runtime import Runtime, as_runtime
from conveyor.scheduler.runner import Scheduler
from conveyor.worker.loop import Worker


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    broker = broker_from_url(f"sqlite:///{tmp_path / 'jobs.db'}")
    return Runtime(broker, clock=FakeClock(1_000.0), settings=Settings())


def test_worker_inspector_and_operator_run_on_a_bare_runtime(runtime: Runtime) -> None:
    handle = runtime.enqueue("not.registered.here")
    worker = Worker(runtime, "default", heartbeat=False, handle_signals=False)
    assert worker.runtime is runtime
    assert worker.run_until_idle() == 1  # no such task here: dead-lettered as unknown_task
    inspector = Inspector(runtime)
    dead = inspector.dead_letters()
    assert [job.id for job in dead.items] == [handle.id]
    operator = Operator(runtime, actor="test")
    assert operator.retry(handle.id)
    assert runtime.broker.get(handle.id).state is JobState.PENDING  # type: ignore[union-attr]
    assert [e["action"] for e in runtime.broker.log_read(AUDIT_LOG, 10)] == ["job.retry"]


def test_scheduler_and_alerts_run_on_a_bare_runtime(runtime: Runtime) -> None:
    runtime.enqueue("later", delay=30)
    scheduler = Scheduler(runtime, sync=False)  # no schedule registry without the facade
    runtime.clock.advance(31)  # type: ignore[attr-defined]
    scheduler.tick()
    assert runtime.broker.counts()["default"]["pending"] == 1
    alerts = AlertManager(runtime)  # the default rules read counts, workers, schedules
    alerts.evaluate()
    assert alerts.states() == []
    assert Inspector(runtime).alerts() == [] and not Operator(runtime).acknowledge("none")
    with pytest.raises(RuntimeError, match="schedule registry"):
        runtime.schedules.sync()


def test_the_app_and_its_processes_share_one_runtime(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}", clock=FakeClock(5.0))
    rt = app.runtime
    assert as_runtime(app) is rt and as_runtime(rt) is rt
    assert app.broker is rt.broker and app.clock is rt.clock and app.tasks is rt.tasks
    assert app.worker().runtime is rt
    assert app.worker().app is app  # middleware reading ``worker.app`` still gets the app
    assert app.scheduler().app is rt
    assert Inspector(app).runtime is rt and Operator(app).runtime is rt
    assert app.alerts.runtime is rt and rt.alerts is app.alerts
    assert rt.schedules is app.schedules
    app.clock = FakeClock(9.0)  # the app's attributes write through to the runtime
    assert rt.now() == 9.0
    with pytest.raises(TypeError, match="Conveyor app or a Runtime"):
        as_runtime(object())  # type: ignore[arg-type]
