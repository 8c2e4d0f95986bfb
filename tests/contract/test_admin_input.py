"""Contract: the app's operator methods refuse arguments of the wrong type by name, the same
on every backend.

``peek(n="5")`` / ``peek(n=1.5)`` were raw TypeErrors or database errors, ``peek(n=-1)``
an empty list or PostgreSQL's InvalidRowCountInLimitClause; ``purge_dead(older_than="x")`` a
TypeError and ``older_than=nan`` purged nothing, everything or raised a Redis script error;
``dead_letters(limit="5")`` a TypeError; a job id that is not a string (``cancel(5)``,
``get_job(5)``, ``requeue_dead(5)``) was "not found" on some backends and a raw TypeError or
PostgreSQL UndefinedFunction on the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conveyor import Conveyor, JobState, ValidationError

NAN = float("nan")
BAD: list[tuple[str, Callable[[Conveyor], Any], str]] = [
    ("peek n str", lambda a: a.peek("default", n="5"), "n"),
    ("peek n float", lambda a: a.peek("default", n=1.5), "n"),
    ("peek n negative", lambda a: a.peek("default", n=-1), "n"),
    ("peek n bool", lambda a: a.peek("default", n=True), "n"),
    ("purge older str", lambda a: a.purge_dead(older_than="x"), "older_than"),
    ("purge older nan", lambda a: a.purge_dead(older_than=NAN), "older_than"),
    ("purge older negative", lambda a: a.purge_dead(older_than=-5), "older_than"),
    ("dead limit str", lambda a: a.dead_letters(limit="5"), "limit"),
    ("dead limit 0", lambda a: a.dead_letters(limit=0), "limit"),
    ("get_job int", lambda a: a.get_job(5), "job_id"),
    ("cancel int", lambda a: a.cancel(5), "job_id"),
    ("requeue_dead int", lambda a: a.requeue_dead(5), "job_id"),
    ("requeue_dead none", lambda a: a.requeue_dead(None), "job_id"),
]


@pytest.mark.parametrize(("label", "call", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_operator_arguments_are_refused_by_name(
    app: Conveyor, label: str, call: Callable[[Conveyor], Any], field: str
) -> None:
    app.enqueue("t")
    delivery = app.dequeue("default")
    assert delivery is not None
    delivery.fail("x")
    with pytest.raises(ValidationError, match=rf"^{field}: "):
        call(app)
    assert app.get_job(delivery.id).state is JobState.DEAD_LETTER  # nothing was touched


def test_good_operator_arguments_still_work(app: Conveyor) -> None:
    app.enqueue("t")
    second = app.enqueue("t")
    assert len(app.peek("default", n=1)) == 1
    delivery = app.dequeue("default")
    assert delivery is not None
    delivery.fail("x")
    assert [j.id for j in app.dead_letters(limit=5)] == [delivery.id]
    assert app.cancel(second.id) is True
    assert app.purge_dead(older_than=0) == 1
