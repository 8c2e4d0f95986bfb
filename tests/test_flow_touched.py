"""Issue 15: a task-wide rate limit (no key) over many ``fair_by`` groups. Every group's head
asks the same bucket; when it is empty, a claim sets the groups aside. They used to be set
aside until the *next* token, all of them: each claim at a token looked at every group again,
leased one job and set the rest aside again. Now each group waits one token more than the one
set aside before it (core/flow.py ``stagger``): one group is due per token, and a claim looks
at a few groups (those served and set aside again meanwhile), not all of them; every tenant
still gets one job per round."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.broker import memlimits, sqllimits
from conveyor.broker.base import Ack

TENANTS = 40
TOKENS = 80


def _counter(app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Groups the backend's claim has looked at so far (the limiter asked for their head)."""
    broker: Any = app.broker
    if hasattr(broker, "client"):  # Redis: one HMGET of a visited head and one of its bucket
        broker.client.config_resetstat()

        def hmgets() -> int:
            stats = broker.client.info("commandstats").get("cmdstat_hmget", {})
            return int(stats.get("calls", 0)) // 2

        return hmgets
    seen = [0]
    target: Any = memlimits.MemoryLimits if "Memory" in type(broker).__name__ else sqllimits
    name = "_admit" if target is memlimits.MemoryLimits else "admit"
    asked = getattr(target, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return asked(*args, **kwargs)

    monkeypatch.setattr(target, name, counted)
    return lambda: seen[0]


def test_one_group_per_token_is_looked_at(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not getattr(app.broker, "supports_flow", False):
        pytest.skip("no flow control on this backend")

    @app.task(name="t.partner", rate_limit="1/s", fair_by="tenant")
    def partner(tenant: str, i: int) -> None: ...

    app.enqueue_many([partner.spec(f"t{i % TENANTS}", i) for i in range(2 * TENANTS)])
    looked = _counter(app, monkeypatch)
    order: list[int] = []
    per_claim: list[int] = []
    for token in range(TOKENS):
        before = looked()
        leases = app.broker.claim(["default"], clock.now(), limit=50, visibility_timeout=60)
        per_claim.append(looked() - before)
        assert len(leases) == 1, token  # one token a second, whatever the number of groups
        order.append(leases[0].job.args[1])
        app.broker.complete([Ack(x.id, x.token) for x in leases], clock.now())
        clock.advance(1.0)
    assert per_claim[0] >= TENANTS  # the first claim sets every group aside once
    assert max(per_claim[1:]) <= TENANTS // 4, per_claim  # then a few per token, not all 40
    if not hasattr(app.broker, "client"):  # round-robin: every tenant once per round
        # (Redis breaks ties between groups due at the same token by name: not exact there)
        for start in (0, TENANTS):
            assert sorted(i % TENANTS for i in order[start : start + TENANTS]) == list(
                range(TENANTS)
            )
