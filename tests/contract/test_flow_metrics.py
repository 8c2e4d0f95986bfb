"""Contract: Prometheus flow-control metrics stay bounded with many fair groups (issue 15:
10,000 tenants must not make 10,000 ``conveyor_limit_waiting`` series)."""

from __future__ import annotations

import re

import pytest

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, RateLimit

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


def _series(text: str, metric: str) -> dict[str, float]:
    """label value -> value of every series of a one-label metric."""
    found = re.findall(rf'^{metric}\{{\w+="([^"]*)"\}} (\S+)$', text, re.M)
    return {label: float(value) for label, value in found}


def test_per_key_buckets_and_slots_stay_bounded(app: Conveyor, clock: FakeClock) -> None:
    from conveyor.monitoring.prometheus import WAITING_SERIES, exposition

    @app.task(
        name="flow.per_key",
        rate_limit=RateLimit("10/s", key="customer"),
        concurrency=ConcurrencyLimit(1, key="customer"),
    )
    def per_key(customer: str) -> None: ...

    keys = WAITING_SERIES * 3
    for k in range(keys):
        per_key.enqueue(f"c{k:04d}")
    claimed = app.broker.claim(["default"], clock.now(), limit=keys, visibility_timeout=600)
    assert len(claimed) == keys
    text = exposition(app)[0].decode()
    running = _series(text, "conveyor_limit_running")
    assert len(running) <= WAITING_SERIES + 1 and sum(running.values()) == keys
    assert running["(other)"] == keys - WAITING_SERIES
    assert 0 < len(_series(text, "conveyor_limit_tokens")) <= WAITING_SERIES
