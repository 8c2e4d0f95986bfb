"""Stop / Quiet of a ``conveyor worker --processes N``: the operator's Stop on any of its rows
stops the whole command (every child, then the supervisor exits 0), as Sidekiq's Stop stops the
process the operator started; ``scope="process"`` stops one child only (its slot stays empty)."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor.monitoring import ops
from conveyor.monitoring.actions import Operator
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.slow


def test_stop_on_one_row_stops_every_process_of_the_worker(env: dict[str, Any]) -> None:
    app = env["app"]
    w = env["worker"]("-p", "2", "-c", "1")
    rows = wait_until(lambda: len(app.workers()) == 2 and app.workers(), timeout=20)
    groups = {r.get("group") for r in rows}
    assert len(groups) == 1 and None not in groups, "both children name their supervisor"
    assert all(r.get("processes") == 2 for r in rows)
    op = Operator(app, actor="alice")
    assert ops.stop_worker(op, str(rows[0]["id"])) == "stop"
    assert w.wait(timeout=30) == 0, w.output()
    assert app.workers() == []
    entry = op.inspector.audit_log()[0]
    assert entry["action"] == "worker.stop" and sorted(entry["processes"]) == sorted(
        str(r["id"]) for r in rows
    )


def test_stop_of_one_process_only_leaves_the_others(env: dict[str, Any]) -> None:
    app = env["app"]
    w = env["worker"]("-p", "2", "-c", "1")
    rows = wait_until(lambda: len(app.workers()) == 2 and app.workers(), timeout=20)
    op = Operator(app, actor="alice")
    ops.stop_worker(op, str(rows[0]["id"]), scope="process")
    wait_until(lambda: [str(r["id"]) for r in app.workers()] == [str(rows[1]["id"])], timeout=20)
    assert w.proc.poll() is None, "the supervisor keeps the other process"
    ops.quiet_worker(op, str(rows[1]["id"]))
    wait_until(lambda: app.workers()[0].get("state") == "quiet", timeout=10)
