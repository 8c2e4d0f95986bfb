"""Contract: the pull API (``app.dequeue`` -> ``Delivery``) refuses bad outcome input by name.

``nack(delay)``, ``fail(message, retry_at=)`` and ``extend(seconds)`` wrote what they were
given: a ``retry_at`` of ``"soon"`` stored as the run time (SQLite: a job that never becomes
due), NaN refused by the database as a raw IntegrityError, a message with a lone surrogate
stored where no read could decode it again (memory) or a raw TypeError, a negative extension
that expired the lease at once. Each is now a ValidationError naming the argument, and the
lease is still the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conveyor import Conveyor, JobState, ValidationError
from tests.support.hostile import UNENCODABLE

BAD: list[tuple[str, Callable[[Any], Any], str]] = [
    ("nack str", lambda d: d.nack("5"), "delay"),
    ("nack nan", lambda d: d.nack(float("nan")), "delay"),
    ("nack inf", lambda d: d.nack(float("inf")), "delay"),
    ("nack negative", lambda d: d.nack(-5), "delay"),
    ("fail retry_at str", lambda d: d.fail("x", retry_at="soon"), "retry_at"),
    ("fail retry_at nan", lambda d: d.fail("x", retry_at=float("nan")), "retry_at"),
    ("fail retry_at inf", lambda d: d.fail("x", retry_at=float("inf")), "retry_at"),
    ("fail message int", lambda d: d.fail(123), "message"),
    ("extend negative", lambda d: d.extend(-5), "seconds"),
    ("extend nan", lambda d: d.extend(float("nan")), "seconds"),
    ("extend str", lambda d: d.extend("5"), "seconds"),
]


@pytest.mark.parametrize(("label", "call", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_outcome_input_is_refused_and_the_lease_kept(
    app: Conveyor, label: str, call: Callable[[Any], Any], field: str
) -> None:
    app.enqueue("t")
    delivery = app.dequeue("default")
    assert delivery is not None
    with pytest.raises(ValidationError, match=rf"^{field}: "):
        call(delivery)
    assert app.get_job(delivery.id).state is JobState.ACTIVE
    delivery.ack("done")  # still ours
    assert app.get_job(delivery.id).state is JobState.COMPLETED


def test_a_failure_message_with_a_lone_surrogate_is_stored_escaped(app: Conveyor) -> None:
    app.enqueue("t")
    delivery = app.dequeue("default")
    assert delivery is not None
    assert delivery.fail(UNENCODABLE["lone_surrogate"]) is JobState.DEAD_LETTER
    job = app.get_job(delivery.id)  # was: TypeError on every read (memory)
    assert job.errors[-1]["message"] == "name-\\udcff.txt"


@pytest.mark.parametrize("vt", [float("nan"), float("inf"), "30", -1, 0])
def test_dequeue_refuses_a_lease_that_is_not_a_finite_positive_number(
    app: Conveyor, vt: Any
) -> None:
    app.enqueue("t")
    with pytest.raises(ValidationError, match=r"^visibility_timeout: must be"):
        app.dequeue("default", visibility_timeout=vt)  # NaN was leased; "30" a raw TypeError
    assert app.dequeue("default") is not None  # nothing was claimed by the refused call


@pytest.mark.parametrize("timeout", [float("nan"), "soon", [1]])
def test_wait_refuses_a_timeout_that_is_not_a_number(app: Conveyor, timeout: Any) -> None:
    """``wait(timeout=nan)`` blocked for ever on memory (a ValueError from SQLite's wait)."""
    import threading

    job = app.enqueue("t")
    caught: list[BaseException] = []

    def wait() -> None:
        try:
            job.wait(timeout=timeout)
        except BaseException as exc:  # the test inspects it
            caught.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(5)
    assert not waiter.is_alive(), "wait() is still blocked"
    assert isinstance(caught[0], ValidationError) and str(caught[0]).startswith("timeout: ")
