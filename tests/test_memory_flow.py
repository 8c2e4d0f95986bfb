"""Memory broker flow-control state after operator actions (issue 15).

The contract test (tests/contract/test_flow_admin.py) checks counts and ``flow_status``; this
one reads the memory broker's limiter state: after ``clear_queue`` no group of the queue is
left in line, parked, or waiting for a slot.
"""

from __future__ import annotations

from conveyor.broker.memory import MemoryBroker
from tests.support.flow_backlog import T0, WAITING, grouped_backlog


def test_clear_leaves_no_groups() -> None:
    broker = MemoryBroker()
    grouped_backlog(broker)
    assert broker.clear_queue("default", T0) == WAITING
    limits = broker.limits
    groups = [*limits.jobs, *limits.placed, *limits.parked, *limits.blocked]
    groups += [key for waiting in limits.waiters.values() for key in waiting]
    assert {queue for queue, _ in groups} == {"other"}
    assert sorted(limits.slots) == [f"conc:t.sync:account={a}" for a in range(3)]


def test_line_pops_in_heap_order() -> None:
    """The groups' ``Line`` (deque + heap) hands out entries exactly in the order one heap of
    ``(eligible at, round-robin number, group)`` would: round-robin at the claim's time, new
    groups at 0 ahead, throttled ones at their token time, a clock that steps back."""
    import heapq
    import random

    from conveyor.broker.memlimits import Line

    rng = random.Random(15)
    line, heap, rr, now = Line(), [], 0, 100.0
    for _ in range(5000):
        if rng.random() < 0.55:
            rr += 1
            at = rng.choice([0.0, now, now, now, now + rng.random() * 5, now - 1.0])
            line.push((at, rr, f"g{rr}"))
            heapq.heappush(heap, (at, rr, f"g{rr}"))
        else:
            now += rng.random() * 0.5
            expected = heapq.heappop(heap) if heap and heap[0][0] <= now else None
            assert line.pop_due(now) == expected
        assert line.first() == (heap[0] if heap else None)
        assert len(line) == len(heap)
