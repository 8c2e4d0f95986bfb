"""Pure routing logic of sharded queues (issue 18, ``core/shards.py``): names, routing, order."""

from __future__ import annotations

import pytest

from conveyor.broker.redis.keys import key_slot
from conveyor.core.job import validate_queue_name
from conveyor.core.shards import (
    MAX_SHARDS,
    SLOTS,
    ShardedSelector,
    ShardMap,
    ShardRouter,
    fold_counts,
    hash_slot,
    key_index,
    parse_shard,
    positional_params,
    shard_names,
)
from conveyor.errors import ValidationError


@pytest.mark.parametrize("tag", ["events", "a", "emails.shard3.12", "x" * 90, "émoji-ü"])
def test_hash_slot_is_redis_cluster_slot(tag: str) -> None:
    assert hash_slot(tag) == key_slot(f"conveyor:{{{tag}}}:ready")


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, MAX_SHARDS])
@pytest.mark.parametrize("name", ["events", "default", "bench", "hot"])
def test_shard_names_fall_in_their_own_slot_band(name: str, n: int) -> None:
    names = shard_names(name, n)
    assert len(set(names)) == n
    for i, shard in enumerate(names):
        validate_queue_name(shard)
        assert shard.startswith(f"{name}.shard{i}")
        assert i * SLOTS // n <= hash_slot(shard) < (i + 1) * SLOTS // n
        assert parse_shard(shard) == (name, i)
    # so three masters with equal slot ranges get an even share
    thirds = [sum(1 for s in names if hash_slot(s) * 3 // SLOTS == m) for m in range(3)]
    assert max(thirds) - min(thirds) <= 1


def test_parse_shard_rejects_plain_names() -> None:
    assert parse_shard("events") is None
    assert parse_shard("events.shardx") is None
    assert parse_shard("a.b.shard12") == ("a.b", 12)


def test_declare_validates() -> None:
    smap = ShardMap()
    for bad in (0, -1, MAX_SHARDS + 1, True, 2.5, "4"):
        with pytest.raises(ValidationError, match="shards"):
            smap.declare("q", bad, None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="shard name"):
        smap.declare("q.shard1", 4, None)
    with pytest.raises(ValidationError, match="at most"):
        smap.declare("x" * 90, 4, None)
    with pytest.raises(ValidationError, match="shard_by"):
        smap.declare("q", 4, 42)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="shard_by"):
        smap.declare("q", 1, "customer")
    smap.declare("q", 4, None)
    assert smap and smap.get("q") is not None
    smap.declare("q", 1, None)  # one shard: a plain queue again
    assert not smap


def _map(n: int = 4, shard_by: object = None, start: int = 0) -> ShardMap:
    smap = ShardMap()
    smap.declare("events", n, shard_by, start)  # type: ignore[arg-type]
    return smap


def test_round_robin_one_pick_per_call_and_plain_queues_untouched() -> None:
    smap = _map(4, start=1)
    names = smap.queues["events"].names
    picks = []
    for _ in range(8):
        router = ShardRouter(smap)
        first = router.route("events", flowed=False, key=None)
        assert router.route("events", flowed=False, key=None) == first  # one batch, one shard
        assert router.route("other", flowed=False, key=None) == "other"
        picks.append(first)
    assert picks == [*names[1:], names[0], *names[1:], names[0]]


def test_flow_goes_to_shard_zero_and_keys_hash() -> None:
    smap = _map(8)
    names = smap.queues["events"].names
    router = ShardRouter(smap)
    assert router.route("events", flowed=True, key="k") == names[0]
    by_key = {router.route("events", flowed=False, key=f"key-{i}") for i in range(200)}
    assert by_key == set(names)  # keys spread over every shard
    assert router.route("events", flowed=False, key="abc") == names[key_index("abc", 8)]
    assert ShardRouter(smap).route("events", flowed=False, key="abc") == names[key_index("abc", 8)]


def test_shard_by_argument_name_positional_or_keyword_and_callable() -> None:
    def task(customer_id: int, amount: float) -> None: ...

    import inspect

    params = positional_params(inspect.signature(task))
    assert params == ("customer_id", "amount")
    smap = _map(8, "customer_id")
    r = ShardRouter(smap)
    a = r.route("events", flowed=False, key=None, args=(7, 1.0), params=params)
    b = r.route("events", flowed=False, key=None, kwargs={"customer_id": 7, "amount": 2})
    c = r.route("events", flowed=False, key=None, args=(8,), kwargs={"amount": 2}, params=params)
    assert a == b and a == smap.queues["events"].by_key("7")
    assert c == smap.queues["events"].by_key("8")
    with pytest.raises(ValidationError, match="customer_id"):
        r.route("events", flowed=False, key=None, kwargs={"amount": 1})
    by_call = _map(8, lambda *a, **kw: kw.get("tenant", "none"))
    r2 = ShardRouter(by_call)
    assert r2.route("events", flowed=False, key=None, kwargs={"tenant": "t1"}) == (
        by_call.queues["events"].by_key("t1")
    )


def test_selector_rotates_the_first_shard_and_keeps_weights() -> None:
    smap = _map(4)
    names = list(smap.queues["events"].names)
    sel = smap.selector([("events", 1)])
    assert isinstance(sel, ShardedSelector)
    assert sel.names == [*names, "events"]
    orders = [sel.order() for _ in range(5)]
    assert [o[0] for o in orders] == [*names, names[0]]
    assert all(sorted(o) == sorted([*names, "events"]) and o[-1] == "events" for o in orders)
    mixed = smap.selector([("high", 3), ("events", 1)])
    firsts = [mixed.order()[0] for _ in range(8)]
    assert firsts.count("high") == 6  # SWRR between logical queues as before
    assert not isinstance(smap.selector([("a", 1)]), ShardedSelector)


def test_fold_counts_one_entry_per_logical_queue() -> None:
    smap = _map(2)
    s0, s1 = smap.queues["events"].names
    counts = {
        "events": {"pending": 1},
        s0: {"pending": 2, "active": 1},
        s1: {"pending": 3, "active": 0},
        "mail": {"pending": 4},
        "other.shard0": {"pending": 5},  # an undeclared shard: still grouped by its name
    }
    out = fold_counts(counts, smap)
    assert out["events"]["pending"] == 6 and out["events"]["active"] == 1
    assert out["events"]["shards"] == {s0: counts[s0], s1: counts[s1]}
    assert out["mail"] == {"pending": 4}
    assert out["other"]["pending"] == 5
    assert smap.members("events") == [s0, s1, "events"] and smap.members("mail") == ["mail"]
