"""Contract: ``app.search`` (and what builds on it: ``dead_letters``, the dashboard's and the
CLI's job lists) refuses filters of the wrong type by name, on every backend.

A string page (``"2"``) was a raw TypeError; ``page=1.5`` a TypeError on two backends and an
empty page on the others; ``since="yesterday"`` an empty result on one backend and four
different errors on the others (PostgreSQL: InvalidTextRepresentation); ``text=5`` an
AttributeError; ``task=5`` / ``queue=5`` / ``id=5`` nothing found on some backends and a raw
database error on PostgreSQL; a NaN ``since`` matched nothing or everything.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, ValidationError

NAN = float("nan")
BAD: list[tuple[str, Any]] = [
    ("page", "2"),
    ("page", 1.5),
    ("page", True),
    ("page", 0),
    ("page_size", "10"),
    ("page_size", 2.5),
    ("page_size", NAN),
    ("page_size", 1001),
    ("since", "yesterday"),
    ("since", NAN),
    ("since", True),
    ("until", [1]),
    ("until", float("inf")),
    ("text", 5),
    ("error", 5),
    ("task", 5),
    ("queue", 5),
    ("id", 5),
]


@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_a_search_filter_of_the_wrong_type_is_refused_by_name(
    app: Conveyor, field: str, value: Any
) -> None:
    app.enqueue("t")
    with pytest.raises(ValidationError, match=rf"^{field}: "):
        app.search(**{field: value})


def test_good_filters_still_work(app: Conveyor) -> None:
    job = app.enqueue("t")
    now = app.now()
    page = app.search(task="t", queue="default", since=now - 1, until=now + 1, page=1)
    assert [j.id for j in page.items] == [job.id]
    assert app.search(since=int(now) - 10, page_size=1000).total == 1
    assert app.search(text="nothing like it").total == 0
