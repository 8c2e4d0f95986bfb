"""Contract: Prometheus flow-control metrics stay bounded with many fair groups (issue 15:
10,000 tenants must not make 10,000 ``conveyor_limit_waiting`` series)."""

from __future__ import annotations

import re

import pytest

from conveyor import Conveyor

pytest.importorskip("prometheus_client")


def _waiting(text: str) -> dict[tuple[str, str], float]:
    """(queue, group) -> value of every ``conveyor_limit_waiting`` series."""
    found = re.findall(
        r'^conveyor_limit_waiting\{group="([^"]*)",queue="([^"]*)",why="[^"]*"\} (\S+)$',
        text,
        re.M,
    )
    return {(queue, group): float(value) for group, queue, value in found}


def test_limit_waiting_keeps_the_biggest_groups_and_sums_the_rest(app: Conveyor) -> None:
    from conveyor.monitoring.prometheus import WAITING_SERIES, exposition

    @app.task(name="flow.tenant_job", fair_by="tenant")
    def tenant_job(tenant: str, n: int) -> None: ...

    tenants = WAITING_SERIES * 3
    for t in range(tenants):
        tenant_job.enqueue(f"t{t:04d}", 0)
    for n in range(5):
        tenant_job.enqueue("big", n)
    series = _waiting(exposition(app)[0].decode())
    assert len(series) <= WAITING_SERIES + 1, f"{len(series)} series"
    assert sum(series.values()) == tenants + 5, "every waiting job is counted once"
    assert [v for (q, g), v in series.items() if "big" in g] == [5.0], "the biggest group is kept"
    assert series[("default", "(other)")] >= tenants - WAITING_SERIES
    text = exposition(app)[0].decode()
    assert f'conveyor_limit_waiting_groups{{queue="default"}} {tenants + 1}.0\n' in text
