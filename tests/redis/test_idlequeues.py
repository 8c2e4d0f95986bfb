"""Which queues a Cluster claim may skip (``broker/redis/idlequeues.py``, issue 18), with plain
times: a queue a claim left empty is a candidate until its own ``next_due`` and for at most
``FRESH_S`` seconds; a claim that found jobs (or left some) drops it. The Redis side (the LLEN
pipeline, the skipped claims) is tested on the real cluster in test_cluster_wake.py."""

from __future__ import annotations

from conveyor.broker.redis.idlequeues import FRESH_S, IdleQueues


def test_a_queue_left_empty_is_skipped_until_its_next_due_or_fresh_s() -> None:
    idle = IdleQueues()
    idle.note("a", 100.0, True, None)  # nothing delayed: FRESH_S
    idle.note("b", 100.0, True, 100.3)  # a delayed job at 100.3
    idle.note("c", 100.0, False, None)  # jobs were left: never skipped
    assert idle.candidates(["a", "b", "c", "d"], 100.2) == ["a", "b"]
    assert idle.candidates(["a", "b", "c"], 100.3) == ["a"]  # b's job is due: claim it
    assert idle.candidates(["a", "b"], 100.0 + FRESH_S) == []  # too old: claim again
    assert idle.next_due({"a", "b"}) == 100.3 and idle.next_due({"a"}) is None


def test_a_claim_that_finds_jobs_drops_the_queue() -> None:
    idle = IdleQueues()
    idle.note("a", 5.0, True, None)
    idle.note("a", 5.1, False, None)
    assert idle.candidates(["a"], 5.2) == []
    idle.note("a", 5.3, True, 9.0)
    assert idle.candidates(["a"], 5.4) == ["a"] and idle.next_due({"a"}) == 9.0
    idle.clear()
    assert idle.candidates(["a"], 5.4) == []


def test_a_marker_popped_during_a_claim_call_keeps_the_queue_off_the_skip_list() -> None:
    """Thread A's claim call finds ``a`` empty; meanwhile thread B's wait pops a marker of
    ``a`` (a job was enqueued) and B's claim is still to come: A's note must not make B's
    claim skip ``a`` (its wake list is empty: B popped the marker)."""
    idle = IdleQueues()
    seen = idle.seen("a")  # A, before its claim call
    idle.woken("a")  # B's wait
    idle.note("a", 1.0, True, None, seen)  # A's claim call returns: empty
    assert idle.candidates(["a", "b"], 1.1) == []
    idle.note("a", 1.2, True, None, idle.seen("a"))  # a later empty claim: skipped again
    assert idle.candidates(["a"], 1.3) == ["a"]
