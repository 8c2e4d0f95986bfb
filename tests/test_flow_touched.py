"""Issue 15: a task-wide rate limit (no key) over many ``fair_by`` groups. Every group's head
asks the same bucket; when it is empty, a claim sets the groups aside. They used to be set
aside until the *next* token, all of them: each claim at a token looked at every group again,
leased one job and set the rest aside again. Now each group waits one token more than the one
set aside before it (core/flow.py ``stagger``): one group is due per token, and a claim looks
at a few groups (those served and set aside again meanwhile), not all of them; every tenant
still gets one job per round."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.broker.base import Ack
from tests.support.flowcount import groups_looked_at

TENANTS = 40
TOKENS = 80


def test_one_group_per_token_is_looked_at(
    app: Conveyor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not getattr(app.broker, "supports_flow", False):
        pytest.skip("no flow control on this backend")

    @app.task(name="t.partner", rate_limit="1/s", fair_by="tenant")
    def partner(tenant: str, i: int) -> None: ...

    app.enqueue_many([partner.spec(f"t{i % TENANTS}", i) for i in range(2 * TENANTS)])
    looked = groups_looked_at(app, monkeypatch)
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
