"""A page far past the last one (``?page=1000000``) on a sharded queue's logical name: the
search merges its members' newest ``page * page_size`` matches, so such a page asked every
shard for 500 million rows — every stored job of the queue read and decoded for an empty
answer. It now answers the empty page from the counts alone, on every backend, from the API,
the pages and the Inspector."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.monitoring.inspect import Inspector


@pytest.fixture
def reads(dash_app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The page size of every search the real broker runs (a spy around it, not a fake)."""
    sizes: list[int] = []
    real = dash_app.broker.search

    def search(query: Any) -> Any:
        sizes.append(query.page_size * query.page)
        return real(query)

    monkeypatch.setattr(dash_app.broker, "search", search)
    return sizes


def sharded(app: Conveyor) -> None:
    app.enqueue("add", (0, 0), queue="events")
    app.queue("events", shards=3)
    for i in range(6):
        app.enqueue("add", (i, i), queue="events")


def test_a_page_past_the_end_reads_no_rows(
    api: TestClient, dash_app: Conveyor, reads: list[int]
) -> None:
    sharded(dash_app)
    r = api.get("/api/v1/jobs", params={"queue": "events", "page": 1_000_000, "page_size": 500})
    assert r.status_code == 200 and r.json()["items"] == [] and r.json()["total"] == 7
    assert max(reads) <= 500, reads
    reads.clear()
    page = Inspector(dash_app).search({"queue": "events"}, page=999_999, page_size=500)
    assert page.items == [] and page.total == 7 and max(reads) <= 500, reads
    first = Inspector(dash_app).search({"queue": "events"}, page=1, page_size=5)
    assert len(first.items) == 5 and first.total == 7  # an ordinary page is unchanged
