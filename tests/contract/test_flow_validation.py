"""Contract: bad flow-control input is a ValidationError naming the field and the rule.

Limits are declared in code (``rate_limit=``, ``RateLimit(key=...)``), overridden at run time
(``app.set_limit``) and evaluated per job at enqueue (key callables): whatever a caller or a
job's arguments bring, the answer is a clear refusal before anything is stored, never a raw
exception or a limit that can never release its jobs.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, RateLimit, ValidationError
from tests.contract.test_flow_limits import claim, needs_flow

HUGE = "1" * 400  # float() of it is infinity


@pytest.mark.parametrize("rate", [f"{HUGE}/s", f"1/{HUGE}s", f"{HUGE}/{HUGE}m"])
def test_rates_past_the_float_range_are_refused(app: Conveyor, rate: str) -> None:
    with pytest.raises(ValidationError, match=r"^rate_limit: .*must be finite"):
        RateLimit(rate)
    with pytest.raises(ValidationError, match=r"^rate_limit: .*must be finite"):
        app.task(name="huge", rate_limit=rate)(lambda: None)
    with pytest.raises(ValidationError, match=r"^limit: .*must be finite"):
        app.set_limit("rate:huge", rate)  # was "burst: must be a number >= 1, got None"


def test_a_key_callable_that_raises_is_named(app: Conveyor) -> None:
    needs_flow(app)

    def region(customer_id: Any, **_: Any) -> str:
        return {"eu": "EU"}[customer_id]

    @app.task(name="keyed", rate_limit=RateLimit("10/s", key=region))
    def keyed(customer_id: str) -> None: ...

    @app.task(name="fair_keyed", fair_by=lambda tenant: tenant.lower())
    def fair_keyed(tenant: Any) -> None: ...

    with pytest.raises(ValidationError, match=r"^rate_limit: the key region\(\) raised KeyError"):
        keyed.enqueue("us")
    with pytest.raises(ValidationError, match=r"^fair_by: the key <lambda>\(\) raised"):
        fair_keyed.enqueue(42)
    assert keyed.enqueue("eu").refresh().state.value == "pending"


class Unprintable:
    """A key value whose ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_key_values_that_are_not_plain_text_are_refused(app: Conveyor) -> None:
    needs_flow(app)

    @app.task(name="conc_keyed", concurrency=ConcurrencyLimit(1, key=lambda account: account))
    def conc_keyed(account: Any) -> None: ...

    for hostile in ("\x1b[2Jred", "tab\there", "bell\x07", "del\x7f", "c1\x85"):
        with pytest.raises(ValidationError, match=r"^concurrency: .*plain text"):
            conc_keyed.enqueue(hostile)
    with pytest.raises(ValidationError, match=r"^concurrency: .*str\(\) raised RuntimeError"):
        conc_keyed.enqueue(Unprintable())
    surrogate = app.task(name="surrogate_key", fair_by=lambda x: "a\udcffb")(lambda x: None)
    with pytest.raises(ValidationError, match=r"^fair_by: .*plain text"):
        surrogate.enqueue(1)


def test_a_key_argument_left_to_its_default_uses_the_default(
    app: Conveyor, clock: FakeClock
) -> None:
    needs_flow(app)

    @app.task(name="summarise", rate_limit=RateLimit("1/h", key="customer_id"))
    def summarise(text: str, customer_id: str = "anonymous") -> None: ...

    first = summarise.enqueue("a")  # was: "customer_id: ... the job has no such argument"
    second = summarise.enqueue("b", customer_id="anonymous")
    claimed = claim(app, clock)
    assert [lease.job.id for lease in claimed] == [first.id]  # one bucket for both
    assert second.refresh().state.value == "pending"


@pytest.mark.parametrize("name", ["rate:t\n", "conc:\x1b[2Jt", "rate:a\udcffb", "rate:"])
def test_limiter_names_with_control_characters_are_refused(app: Conveyor, name: str) -> None:
    needs_flow(app)
    with pytest.raises(ValidationError, match=r"^name: "):
        app.set_limit(name, "1/s" if name.startswith("rate:") else 2)
    with pytest.raises(ValidationError, match=r"^name: "):
        app.set_limit(name, None)


def test_a_concurrency_past_the_integer_range_is_refused_when_declared(app: Conveyor) -> None:
    """It was accepted, and every enqueue then failed with "job: cannot be encoded as JSON"."""
    with pytest.raises(ValidationError, match=r"^concurrency: must be an integer"):
        ConcurrencyLimit(10**30, key="account")
    with pytest.raises(ValidationError, match=r"^concurrency: must be an integer"):
        app.task(name="wide", concurrency=10**30)(lambda: None)
    assert ConcurrencyLimit(2**31 - 1).n == 2**31 - 1


def test_a_refused_queue_declaration_changes_nothing(app: Conveyor) -> None:
    """``app.queue`` checked a keyed limit only after re-declaring the queue's shards: the
    refused call had made a sharded queue plain again."""
    app.queue("spread", shards=4)
    with pytest.raises(ValidationError, match=r"^queue: queue limits take no key"):
        app.queue("spread", rate_limit=RateLimit("1/s", key="account"))
    sharded = app.runtime.shards.get("spread")
    assert sharded is not None and len(sharded.names) == 4


def test_debounce_with_a_run_time_is_refused(app: Conveyor, clock: FakeClock) -> None:
    """``debounce=`` sets the run time itself: ``delay`` / ``run_at`` next to it were dropped
    without a word."""

    @app.task(name="reindex")
    def reindex(doc: str) -> None: ...

    with pytest.raises(ValidationError, match=r"^debounce: cannot be combined with delay"):
        reindex.options(debounce=5.0, delay=60).enqueue("a")
    with pytest.raises(ValidationError, match=r"^debounce: cannot be combined with delay"):
        reindex.options(debounce=5.0, run_at=clock.now() + 60).enqueue("a")
    assert reindex.options(debounce=5.0).enqueue("a").state.value == "scheduled"


def test_a_burst_for_a_concurrency_limit_is_refused(app: Conveyor) -> None:
    """``conveyor limits set conc:x 2 --burst 5`` stored 2 and dropped the burst silently."""
    needs_flow(app)
    with pytest.raises(ValidationError, match=r"^burst: .*rate limits"):
        app.set_limit("conc:sync", 2, burst=5)
    assert "conc:sync" not in app.limits()["limits"]


def test_a_slow_rate_can_be_set_at_run_time(app: Conveyor) -> None:
    """``"1/m"`` works at declaration (burst 1), but ``set_limit`` took the count as the burst:
    "0.5/s" was refused with "burst: must be a number >= 1, got None"."""
    needs_flow(app)
    app.set_limit("rate:slow", "0.5/s")
    assert app.limits()["limits"]["rate:slow"] == [0.5, 1.0, 1.0]


@pytest.mark.parametrize("key", ["unique:while_queued:x", "debounce:x", "unique:"])
def test_an_idempotency_key_in_the_unique_or_debounce_namespace_is_refused(
    app: Conveyor, clock: FakeClock, key: str
) -> None:
    """``unique=`` and ``debounce=`` store their keys as idempotency keys under these
    prefixes; a caller's own key there would take on their semantics (a "debounce:" key
    replaced the waiting job's arguments instead of deduplicating)."""

    @app.task(name="keyed_job")
    def keyed_job(n: int) -> None: ...

    with pytest.raises(ValidationError, match=r"^idempotency_key: .*reserved"):
        keyed_job.options(idempotency_key=key).enqueue(1)
    with pytest.raises(ValidationError, match=r"^idempotency_key: .*reserved"):
        app.enqueue_many([keyed_job.options(idempotency_key=key).spec(2)])
    assert app.broker.counts().get("default", {}).get("pending", 0) == 0
    first = keyed_job.options(idempotency_key="uniquely:" + key).enqueue(3)
    again = keyed_job.options(idempotency_key="uniquely:" + key).enqueue(4)
    assert again.duplicate and again.id == first.id
