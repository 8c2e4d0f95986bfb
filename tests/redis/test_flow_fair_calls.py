"""Issue 15's Redis fair-group number: what a claim of grouped jobs costs inside claim.lua
(``flow_take`` in _flow.lua), counted in Redis commands (``INFO commandstats``): a batch of
groups reserves its sequence numbers with one INCRBY and moves its groups with one ZADD, where
each leased job cost one of each; round-robin order and the group keys stay as they were."""

from __future__ import annotations

from conveyor import ConcurrencyLimit, Conveyor, FakeClock
from conveyor.broker.records import Ack
from conveyor.broker.redis import RedisBroker

T0 = 1_700_000_000.0


def test_a_fair_claim_moves_its_groups_in_one_call(rbroker: RedisBroker) -> None:
    app = Conveyor(rbroker, clock=FakeClock(T0))

    @app.task(name="t.fair", fair_by="tenant")
    def fair(tenant: str, i: int) -> None: ...

    app.enqueue_many([fair.spec(f"t{i % 32}", i) for i in range(96)])  # three jobs each
    rbroker.client.config_resetstat()
    leases = rbroker.claim(["default"], T0, limit=32, visibility_timeout=60)
    stats = rbroker.client.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
    assert len(leases) == 32
    assert calls.get("incrby", 0) <= 2 and calls.get("zadd", 0) <= 3, calls
    assert sorted(x.job.args[1] for x in leases) == list(range(32))  # every group's first job
    second = rbroker.claim(["default"], T0, limit=64, visibility_timeout=60)
    assert [x.job.args[1] for x in second] == list(range(32, 96))  # round-robin, in order
    prefix = rbroker.keys.flow("default", "")
    left = {k.decode()[len(prefix) :] for k in rbroker.client.scan_iter(match=prefix + "*")}
    assert not any(k.startswith("g:") for k in left) and "groups" not in left, left
    app.close()


def test_completing_fair_jobs_reads_no_flow_record(rbroker: RedisBroker) -> None:
    """A fair-only group holds no concurrency slot (every slot name, ``conc:...``, is part of
    the group text), so its completion must not read and decode the job's flow record; a job
    with a slot still frees it."""
    app = Conveyor(rbroker, clock=FakeClock(T0))

    @app.task(name="t.fair", fair_by="tenant")
    def fair(tenant: str, i: int) -> None: ...

    @app.task(name="t.one", concurrency=ConcurrencyLimit(1, key="acct"))
    def one(acct: str, i: int) -> None: ...

    app.enqueue_many([fair.spec(f"t{i}", i) for i in range(16)])
    leases = rbroker.claim(["default"], T0, limit=16, visibility_timeout=60)
    rbroker.client.config_resetstat()
    assert rbroker.complete([Ack(x.id, x.token) for x in leases], T0) == [True] * 16
    stats = rbroker.client.info("commandstats")
    assert stats.get("cmdstat_hget", {}).get("calls", 0) == 0, stats.get("cmdstat_hget")
    app.enqueue_many([one.spec("a", 1), one.spec("a", 2)])
    first = rbroker.claim(["default"], T0, limit=8, visibility_timeout=60)
    assert [x.job.args[1] for x in first] == [1]  # the slot of acct=a is held
    assert rbroker.complete([Ack(first[0].id, first[0].token)], T0) == [True]
    second = rbroker.claim(["default"], T0, limit=8, visibility_timeout=60)
    assert [x.job.args[1] for x in second] == [2]  # freed by the completion
    app.close()
