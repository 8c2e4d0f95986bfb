"""``conveyor jobs --queue``, ``bulk --queue`` and ``clear`` on a sharded queue's logical name
reach every shard and the jobs stored before sharding, on every backend, whether the app
the CLI loads declares the shards (``--app``) or not (a bare app, as with ``--url``)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from conveyor import Conveyor, JobState

from .conftest import run_json


@pytest.fixture(params=["declared", "undeclared"])
def sharded_cli(
    cli_app: tuple[Conveyor, str], request: pytest.FixtureRequest
) -> Iterator[tuple[Conveyor, str, list[str]]]:
    """``events`` with one job stored before it was sharded and 6 over 3 shards, one ``mail``
    job; the CLI target declares the shards or is a bare app on the same store."""
    app, target = cli_app
    ids = [app.enqueue("add", (0, 0), queue="events").id]
    app.queue("events", shards=3)
    ids += [app.enqueue("add", (i, i), queue="events").id for i in range(6)]
    app.enqueue("add", (1, 1), queue="mail")
    if request.param == "declared":
        yield app, target, ids
        return
    name = f"_conveyor_cli_bare_{id(app)}"
    module = types.ModuleType(name)
    module.app = Conveyor(app.broker, clock=app.runtime.clock)  # type: ignore[attr-defined]
    sys.modules[name] = module
    yield app, f"{name}:app", ids
    sys.modules.pop(name, None)


def test_jobs_search_by_the_logical_name_lists_every_shard(
    sharded_cli: tuple[Conveyor, str, list[str]],
) -> None:
    _, target, ids = sharded_cli
    out = run_json("jobs", "--queue", "events", "--app", target)
    assert out["total"] == 7 and {j["id"] for j in out["items"]} == set(ids)


def test_bulk_by_the_logical_name_acts_on_every_shard(
    sharded_cli: tuple[Conveyor, str, list[str]],
) -> None:
    app, target, ids = sharded_cli
    out = run_json("bulk", "cancel", "--queue", "events", "--app", target)
    assert (out["matched"], out["done"]) == (7, 7)
    assert {app.get_job(i).state for i in ids} == {JobState.CANCELLED}
    assert app.stats()["queues"]["mail"]["pending"] == 1


def test_clear_by_the_logical_name_clears_every_shard(
    sharded_cli: tuple[Conveyor, str, list[str]],
) -> None:
    app, target, _ = sharded_cli
    out = run_json("clear", "events", "--yes", "--app", target)
    assert out["deleted"] == 7
    assert app.stats()["queues"]["events"]["pending"] == 0
    assert app.stats()["queues"]["mail"]["pending"] == 1
