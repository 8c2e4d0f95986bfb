"""Contract: ``debounce=`` (issue 15) — the newest arguments win and the delay restarts."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState, ValidationError


def test_debounce_replaces_the_waiting_job(app: Conveyor, clock: FakeClock) -> None:
    ran: list[str] = []

    @app.task(name="flow.search_index")
    def reindex(doc: str) -> None:
        ran.append(doc)

    first = reindex.options(debounce=5.0, unique_key="doc-7").enqueue("v1")
    assert first.refresh().state is JobState.SCHEDULED
    clock.advance(3)
    second = reindex.options(debounce=5.0, unique_key="doc-7").enqueue("v2")
    assert second.duplicate and second.id == first.id
    snap = first.refresh()
    assert snap.args == ["v2"] and snap.run_at == pytest.approx(clock.now() + 5, abs=1e-3)
    other = reindex.options(debounce=5.0, unique_key="doc-8").enqueue("x")
    assert not other.duplicate
    clock.advance(4)  # 7 s after the first enqueue, 4 after the second: not yet
    app.worker().run_until_idle()
    assert ran == []
    clock.advance(1.5)
    app.worker().run_until_idle()
    assert sorted(ran) == ["v2", "x"]
    third = reindex.options(debounce=5.0, unique_key="doc-7").enqueue("v3")
    assert not third.duplicate, "the debounced job ran: a new one starts a new wait"


def test_bad_debounce_is_refused(app: Conveyor) -> None:
    with pytest.raises(ValidationError, match="debounce"):
        app.enqueue("t", debounce=0)
    with pytest.raises(ValidationError, match="debounce"):
        app.enqueue("t", debounce=5, unique="while_queued")


def test_debounce_through_the_async_enqueue_paths(app: Conveyor, clock: FakeClock) -> None:
    """``enqueue_async`` and ``enqueue_many_async`` debounce as ``enqueue`` does: the waiting
    job gets the newest arguments and its delay restarts (they used to keep the old ones)."""
    import asyncio

    from conveyor import JobSpec

    @app.task(name="flow.search_index")
    def reindex(doc: str) -> None: ...

    async def main() -> None:
        opts = reindex.options(debounce=5.0, unique_key="doc-7")
        first = await opts.enqueue_async("v1")
        clock.advance(3)
        second = await opts.enqueue_async("v2")
        assert second.duplicate and second.id == first.id
        snap = first.refresh()
        assert snap.args == ["v2"] and snap.run_at == pytest.approx(clock.now() + 5, abs=0.01)
        clock.advance(2)
        spec = JobSpec("flow.search_index", ("v3",), {}, {"debounce": 5.0, "unique_key": "doc-7"})
        (third,) = await app.enqueue_many_async([spec])
        assert third.duplicate and third.id == first.id
        assert third.args == ["v3"], "the returned handle shows the newest arguments"
        snap = first.refresh()
        assert snap.args == ["v3"] and snap.run_at == pytest.approx(clock.now() + 5, abs=0.01)
        clock.advance(1)
        fourth = await app.enqueue_async(reindex, ["v4"], debounce=5.0, unique_key="doc-7")
        assert fourth.duplicate and first.refresh().args == ["v4"]

    asyncio.run(main())
