"""Seed 004, "Lab 06: Durable Job Queue", done with Conveyor.

The lab builds an SQS-style queue: at-least-once delivery, idempotency keys that deduplicate
producer retries, a visibility timeout after which an unacknowledged job is delivered again
(with its delivery count raised), ``ack`` and ``nack(requeue_delay)``. Conveyor's low-level
consumer API is that queue. The mapping:

    JobQueue(default_visibility_timeout,     ->  Conveyor("memory://", clock=FakeClock(),
             idempotency_ttl)                      settings=Settings(visibility_timeout=...,
                                                                     idempotency_ttl=...))
    enqueue(payload, idempotency_key=k)      ->  app.enqueue(task, args=[payload],
                                                             idempotency_key=k) -> handle.id
                                                   (handle.duplicate is True for a repeat)
    dequeue(visibility_timeout=vt) -> Job    ->  app.dequeue(queue, visibility_timeout=vt)
                                                   -> Delivery (or None)
    job.job_id / payload / delivery_count    ->  delivery.id / delivery.job.args[0] /
                                                   delivery.delivery_count
    ack(job_id) / nack(job_id, delay)        ->  delivery.ack() / delivery.nack(delay=...)
    background scavenger                     ->  the lease reaper that every worker and the
                                                   scheduler run; here called directly as
                                                   app.broker.reap_expired(now)
    max_redeliveries + DLQ (follow-up)       ->  built in: the 3rd lost delivery is a poison
                                                   pill, dead-lettered with kind "worker_lost"

Differences worth knowing: an acked job is kept as ``completed`` (inspectable until retention
drops it) instead of being deleted; a consumer whose lease expired cannot ack any more
(``LeaseLost``: fencing tokens stop a zombie from overwriting the newer delivery).
Run it: ``python tests/seeds/seed004_visibility_timeout.py``.
"""

from __future__ import annotations

import random
from typing import Any

from conveyor import Conveyor, FakeClock, LeaseLost
from conveyor.config import Settings

TASK = "send_email"  # the consumer below handles jobs itself; no worker runs this task


def make_queue(
    visibility_timeout: float = 30.0, idempotency_ttl: float = 300.0
) -> tuple[Conveyor, FakeClock]:
    """``JobQueue(default_visibility_timeout, idempotency_ttl)``."""
    clock = FakeClock(1_700_000_000.0)
    settings = Settings(visibility_timeout=visibility_timeout, idempotency_ttl=idempotency_ttl)
    return Conveyor("memory://", clock=clock, rng=random.Random(0), settings=settings), clock


def scavenge(app: Conveyor) -> int:
    """One reaper pass: expired leases become visible again (what workers run periodically)."""
    return app.broker.reap_expired(app.now())


def basic_enqueue_ack() -> dict[str, Any]:
    """test_basic_enqueue_ack: enqueue, dequeue the same id, ack, and the queue is empty."""
    app, _ = make_queue()
    job_id = app.enqueue(TASK, args=["hello"]).id
    delivery = app.dequeue("default")
    assert delivery is not None
    got = {
        "id": delivery.id,
        "payload": delivery.job.args[0],
        "delivery_count": delivery.delivery_count,
    }
    delivery.ack()
    return {
        "job_id": job_id,
        "delivered": got,
        "after_ack": app.dequeue("default"),
        "state": str(app.get_job(job_id).state),
    }


def idempotency_dedup() -> dict[str, Any]:
    """test_idempotency_dedup, plus the TTL the lab's reference forgets to check."""
    app, clock = make_queue(idempotency_ttl=300.0)
    first = app.enqueue(TASK, args=["send-email-123"], idempotency_key="email-abc")
    second = app.enqueue(TASK, args=["send-email-123"], idempotency_key="email-abc")
    pending = app.stats()["queues"]["default"]["pending"]
    clock.advance(301.0)  # the dedup window is over: the same key makes a new job
    third = app.enqueue(TASK, args=["send-email-123"], idempotency_key="email-abc")
    return {
        "first": (first.id, first.duplicate),
        "second": (second.id, second.duplicate),
        "pending_after_two": pending,
        "third_after_ttl": (third.id, third.duplicate),
    }


def visibility_timeout_redelivery() -> dict[str, Any]:
    """test_visibility_timeout_redelivery: a consumer crashes; the job comes back after 10 s."""
    app, clock = make_queue()
    job_id = app.enqueue(TASK, args=["x"]).id
    d1 = app.dequeue("default", visibility_timeout=10)
    assert d1 is not None
    first_count = d1.delivery_count
    # ... the consumer crashes here and never acks ...
    clock.advance(9.0)
    scavenge(app)
    before_timeout = app.dequeue("default", visibility_timeout=10)  # still invisible
    clock.advance(2.0)  # 11 s after the first delivery
    reaped = scavenge(app)
    d2 = app.dequeue("default", visibility_timeout=10)
    assert d2 is not None
    try:
        d1.ack()  # the crashed consumer wakes up: its lease is gone
        zombie_ack = "accepted"
    except LeaseLost:
        zombie_ack = "LeaseLost"
    d2.extend(30)  # a long job keeps its lease alive
    clock.advance(25.0)
    scavenge(app)
    still_leased = str(app.get_job(job_id).state)
    d2.ack()
    job = app.get_job(job_id)
    return {
        "job_id": job_id,
        "first_delivery_count": first_count,
        "visible_before_timeout": before_timeout is not None,
        "reaped": reaped,
        "redelivered_id": d2.id,
        "redelivered_payload": d2.job.args[0],
        "second_delivery_count": d2.delivery_count,
        "zombie_ack": zombie_ack,
        "state_after_extend": still_leased,
        "final_state": str(job.state),
        "lost_deliveries": job.lost,
        "error_kinds": [e["kind"] for e in job.errors],
    }


def nack_requeue() -> dict[str, Any]:
    """test_nack_requeue: nack() makes the job visible again at once."""
    app, _ = make_queue()
    job_id = app.enqueue(TASK, args=["x"]).id
    d1 = app.dequeue("default")
    assert d1 is not None
    state = d1.nack()
    d2 = app.dequeue("default")
    assert d2 is not None
    d2.ack()
    return {
        "job_id": job_id,
        "state_after_nack": str(state),
        "redelivered_id": d2.id,
        "delivery_count": d2.delivery_count,
    }


def nack_with_delay(requeue_delay: float = 5.0) -> dict[str, Any]:
    """nack(requeue_delay=5): invisible for 5 s, then delivered again."""
    app, clock = make_queue()
    job_id = app.enqueue(TASK, args=["x"]).id
    d1 = app.dequeue("default")
    assert d1 is not None
    state = d1.nack(delay=requeue_delay)
    at_once = app.dequeue("default")
    clock.advance(requeue_delay - 0.1)
    just_before = app.dequeue("default")
    clock.advance(0.1)
    d2 = app.dequeue("default")
    assert d2 is not None
    d2.ack()
    return {
        "job_id": job_id,
        "requeue_delay": requeue_delay,
        "state_after_nack": str(state),
        "visible_at_once": at_once is not None,
        "visible_just_before": just_before is not None,
        "redelivered_id": d2.id,
        "delivery_count": d2.delivery_count,
        "final_state": str(app.get_job(job_id).state),
    }


def poison_pill() -> dict[str, Any]:
    """Follow-up: a job whose consumer always crashes ends in the dead-letter queue."""
    app, clock = make_queue()
    job_id = app.enqueue(TASK, args=["crashes-every-consumer"]).id
    counts = []
    while (d := app.dequeue("default", visibility_timeout=10)) is not None:
        counts.append(d.delivery_count)
        clock.advance(11.0)  # the consumer dies every time
        scavenge(app)
    job = app.get_job(job_id)
    return {
        "delivery_counts": counts,
        "state": str(job.state),
        "lost": job.lost,
        "in_dead_letters": [h.id for h in app.dead_letters()] == [job_id],
        "last_error": job.last_error,
    }


def run_scenario() -> dict[str, dict[str, Any]]:
    """The lab's four tests, nack with a delay, and the poison-pill follow-up."""
    return {
        "basic": basic_enqueue_ack(),
        "idempotency": idempotency_dedup(),
        "redelivery": visibility_timeout_redelivery(),
        "nack": nack_requeue(),
        "nack_delay": nack_with_delay(),
        "poison": poison_pill(),
    }


def main() -> None:
    f = run_scenario()
    print(
        "Seed 004 (Lab 06): a durable job queue with visibility timeouts, on Conveyor "
        "(memory://, FakeClock)"
    )

    b = f["basic"]
    print("\nenqueue -> dequeue -> ack:")
    print(
        f"  delivered {b['delivered']['payload']!r} (same id: "
        f"{b['delivered']['id'] == b['job_id']}, delivery_count="
        f"{b['delivered']['delivery_count']}); after ack: dequeue() -> {b['after_ack']}, "
        f"job {b['state']}"
    )

    i = f["idempotency"]
    print("\nIdempotency key 'email-abc':")
    print(f"  1st enqueue -> {i['first'][0]} (duplicate={i['first'][1]})")
    print(
        f"  2nd enqueue -> {i['second'][0]} (duplicate={i['second'][1]}); "
        f"pending jobs: {i['pending_after_two']}"
    )
    print(
        f"  301 s later (TTL 300 s) -> {i['third_after_ttl'][0]} "
        f"(duplicate={i['third_after_ttl'][1]})"
    )

    r = f["redelivery"]
    print("\nVisibility timeout 10 s; the consumer crashes without acking:")
    print(f"  delivery 1: delivery_count={r['first_delivery_count']}")
    print(f"  at +9 s the job is visible? {r['visible_before_timeout']}")
    print(
        f"  at +11 s the reaper returns {r['reaped']} lease(s); delivery 2: same id "
        f"{r['redelivered_id'] == r['job_id']}, payload {r['redelivered_payload']!r}, "
        f"delivery_count={r['second_delivery_count']}"
    )
    print(f"  the crashed consumer's late ack -> {r['zombie_ack']}")
    print(
        f"  extend(30) keeps it leased 25 s later: {r['state_after_extend']}; "
        f"ack -> {r['final_state']} (errors recorded: {r['error_kinds']})"
    )

    n = f["nack"]
    print(
        f"\nnack(): job {n['state_after_nack']} again; redelivered with "
        f"delivery_count={n['delivery_count']}"
    )

    nd = f["nack_delay"]
    print(
        f"\nnack(delay={nd['requeue_delay']:g}): {nd['state_after_nack']}; visible at once? "
        f"{nd['visible_at_once']}; at +4.9 s? {nd['visible_just_before']}"
    )
    print(
        f"  at +5 s: redelivered, delivery_count={nd['delivery_count']}, then {nd['final_state']}"
    )

    p = f["poison"]
    print(
        f"\nPoison pill: deliveries {p['delivery_counts']}, then {p['state']} ({p['last_error']})"
    )


if __name__ == "__main__":
    main()
