"""Contract: an operator's logical queue name means the whole sharded queue everywhere.

``app.queue("events", shards=N)``: searches and filters by ``queue="events"`` (``app.search``,
``dead_letters``, the dashboard's and the API's job lists), bulk actions on a search
(``conveyor bulk``, ``POST /jobs/bulk``) and clearing the queue reach every shard and the
logical queue itself (jobs stored before the queue was sharded), newest first across all of
them, with one total. So does a process that does not declare the queue (``conveyor --url``,
a dashboard run from a URL): the shards are found among the stored queues by name.
"""

from __future__ import annotations

from typing import Any

from conveyor import Conveyor, FakeClock, JobState
from conveyor.monitoring import ops
from conveyor.monitoring.actions import Operator


def store(app: Conveyor, clock: FakeClock, n: int = 3, jobs: int = 6) -> dict[str, Any]:
    """One job stored in ``events`` before it was sharded, then ``jobs`` jobs over its ``n``
    shards and one in ``mail``, a second apart (newest first is a known order)."""
    old = app.enqueue("t", ("old",), queue="events")
    app.queue("events", shards=n)
    new = []
    for i in range(jobs):
        clock.advance(1)
        new.append(app.enqueue("t", (i,), queue="events"))
    clock.advance(1)
    mail = app.enqueue("t", queue="mail")
    shards = app.runtime.shards.get("events")
    assert shards is not None and {h.queue for h in new} == set(shards.names)
    return {"old": old, "new": new, "mail": mail, "names": shards.names}


def undeclared(app: Conveyor) -> Conveyor:
    """Another process on the same store that does not declare ``events`` sharded."""
    return Conveyor(app.broker, clock=app.runtime.clock)


def test_a_search_by_the_logical_name_finds_every_shard_newest_first(
    app: Conveyor, clock: FakeClock
) -> None:
    s = store(app, clock)
    newest_first = [h.id for h in reversed(s["new"])] + [s["old"].id]
    for who in (app, undeclared(app)):
        page = who.search(queue="events", page_size=50)
        assert page.total == 7 and [j.id for j in page.items] == newest_first
        pages = [who.search(queue="events", page=p, page_size=3) for p in (1, 2, 3)]
        assert [p.total for p in pages] == [7, 7, 7] and pages[0].pages == 3
        assert [j.id for p in pages for j in p.items] == newest_first
        assert who.search(queue="events", page=4, page_size=3).items == []
        pending = who.search(queue="events", state=JobState.PENDING, text="old")
        assert [j.id for j in pending.items] == [s["old"].id]
        one = who.search(queue=s["names"][1])  # a shard by its own name: that shard only
        assert {j.queue for j in one.items} == {s["names"][1]} and one.total == 2
        assert [j.id for j in who.search(queue="mail").items] == [s["mail"].id]
    filtered = Operator(app, "test").inspector.search({"queue": "events"}, page_size=5)
    assert filtered.total == 7 and [j.id for j in filtered.items] == newest_first[:5]


def test_dead_letters_of_the_logical_name_cover_every_shard(
    app: Conveyor, clock: FakeClock
) -> None:
    s = store(app, clock, jobs=3)
    got = [app.dequeue("events") for _ in range(4)]
    for d in got:
        assert d is not None
        d.fail("no")
    assert {j.id for j in app.dead_letters(queue="events")} == {
        s["old"].id,
        *(h.id for h in s["new"]),
    }
    assert len(undeclared(app).dead_letters(queue="events")) == 4


def test_a_bulk_action_on_a_search_by_the_logical_name_reaches_every_shard(
    app: Conveyor, clock: FakeClock
) -> None:
    s = store(app, clock)
    result = Operator(app, "test").bulk("cancel", filters={"queue": "events"})
    assert (result.matched, result.done) == (7, 7)
    for h in [s["old"], *s["new"]]:
        assert h.refresh().state is JobState.CANCELLED
    assert s["mail"].refresh().state is JobState.PENDING
    again = Operator(undeclared(app), "test").bulk(
        "delete", filters={"queue": "events", "state": "cancelled"}
    )
    assert (again.matched, again.done) == (7, 7)
    assert app.search(queue="events").total == 0


def test_clear_pause_and_purge_from_a_process_that_does_not_declare_the_shards(
    app: Conveyor, clock: FakeClock
) -> None:
    s = store(app, clock)
    other = undeclared(app)
    other.pause("events")
    assert {*s["names"], "events"} <= app.broker.paused_queues()
    other.resume("events")
    assert not {*s["names"], "events"} & app.broker.paused_queues()
    assert ops.clear_queue(Operator(other, "test"), "events") == 7
    assert app.stats()["queues"]["events"]["pending"] == 0
    assert s["mail"].refresh().state is JobState.PENDING


def test_dequeue_by_the_logical_name_takes_every_shard_in_an_undeclaring_process(
    app: Conveyor, clock: FakeClock
) -> None:
    """``app.dequeue("events")`` leased only from the queue named ``events`` in a process
    that does not declare it sharded: the jobs in its shards were never delivered."""
    s = store(app, clock)
    puller = undeclared(app)
    got = [puller.dequeue("events") for _ in range(8)]
    delivered = [d for d in got if d is not None]
    assert len(delivered) == 7  # the 6 in shards and the one stored before sharding
    assert {d.id for d in delivered} == {s["old"].id, *(h.id for h in s["new"])}
    for d in delivered:
        d.ack()
    assert puller.dequeue("mail") is not None  # another queue: itself only
    assert puller.dequeue("events") is None
