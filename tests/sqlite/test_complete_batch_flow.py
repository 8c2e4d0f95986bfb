"""SQLite ``complete`` of a batch: workflow dependants are found with one query per batch.

Plain jobs have no workflow edges; the per-job edge lookup of session 4 cost every drained job
one more SQL statement. ``SqlFlow.done_many`` asks once which of the batch's jobs have
unmarked out-edges and walks only those, with the same releases as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState, chord, group
from conveyor.broker.base import Ack
from conveyor.broker.sqlflow import SqlFlow


def test_a_batch_releases_its_dependants_and_looks_up_only_workflow_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'q.db'}")

    @app.task
    def plain(n: int) -> None:
        return None

    @app.task
    def double(x: int) -> int:
        return 2 * x

    @app.task
    def total(xs: list[int]) -> int:
        return sum(xs)

    for i in range(20):
        plain.enqueue(i)
    fan = chord(group(double.partial(i) for i in range(3)), total.partial()).enqueue()
    looked_up: list[str] = []
    out_edges = SqlFlow.out_edges

    def spy(self: SqlFlow, parent: str) -> Any:
        looked_up.append(parent)
        return out_edges(self, parent)

    monkeypatch.setattr(SqlFlow, "out_edges", spy)
    now = app.now()
    leases = app.broker.claim(["default"], now, limit=100, worker_id="w")
    assert len(leases) == 23  # the chord's callback waits
    acks = [
        Ack(
            lease.job.id,
            lease.token,
            2 * lease.job.args[0] if lease.job.task == double.name else None,
        )
        for lease in leases
    ]
    assert app.broker.complete(acks, now) == [True] * 23
    members = {lease.job.id for lease in leases if lease.job.task == double.name}
    assert sorted(looked_up) == sorted(members)  # not one lookup per plain job
    callback = next(job for job in fan.jobs() if job.task == total.name)
    assert callback.state is JobState.PENDING and callback.args == [[0, 2, 4]]
    app.worker().run_until_idle()
    assert fan.result() == 6
