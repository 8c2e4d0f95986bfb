"""Contract: documents with TTL and CAS, bounded logs, counters — the stores schedules,
the worker registry, alerts and metrics are built on."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from conveyor.broker.base import Broker


def test_documents_put_get_list_delete_ttl(broker: Broker) -> None:
    broker.doc_put("c", "a", {"x": 1, "nested": {"y": [1, 2]}}, 100.0)
    broker.doc_put("c", "b", {"x": 2}, 100.0, ttl=10)
    assert broker.doc_get("c", "a", 100.0) == {"x": 1, "nested": {"y": [1, 2]}}
    assert set(broker.doc_list("c", 105.0)) == {"a", "b"}
    assert set(broker.doc_list("c", 111.0)) == {"a"}
    assert broker.doc_get("c", "b", 111.0) is None
    assert broker.doc_delete("c", "a") and not broker.doc_delete("c", "a")
    assert broker.doc_list("c", 111.0) == {}


def test_document_compare_and_set(broker: Broker) -> None:
    broker.doc_put("s", "tick", {"next": 60.0, "n": 0}, 0.0)
    assert broker.doc_update_if("s", "tick", "next", 60.0, {"next": 120.0, "n": 1}, 0.0)
    assert not broker.doc_update_if("s", "tick", "next", 60.0, {"next": 999.0}, 0.0)
    assert broker.doc_get("s", "tick", 0.0) == {"next": 120.0, "n": 1}
    assert not broker.doc_update_if("s", "missing", "next", None, {"a": 1}, 0.0)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (object(), "Type is not JSON serializable: object"),
        ({"deep": [object()]}, "Type is not JSON serializable: object"),
        ({1, 2}, "Type is not JSON serializable: set"),
        ({1: "a"}, "Dict key must be str"),
    ],
)
def test_a_document_value_json_cannot_hold_is_refused_and_nothing_is_lost(
    broker: Broker, value: Any, problem: str
) -> None:
    """The memory broker kept any Python object (a copy of it) where SQLite, Redis and
    PostgreSQL refuse it: a side document written by code tested on the memory broker only
    failed in production. Every backend refuses it alike, and the stored document stays."""
    broker.docs.put("c", "a", {"x": 1}, 100.0)
    with pytest.raises(TypeError, match=f"^{re.escape(problem)}$"):
        broker.docs.put("c", "a", {"x": value}, 100.0)
    with pytest.raises(TypeError, match=f"^{re.escape(problem)}$"):
        broker.docs.update_if("c", "a", "x", 1, {"x": 2, "y": value}, 100.0)
    assert broker.docs.get("c", "a", 100.0) == {"x": 1}


def test_documents_come_back_as_json_on_every_backend(broker: Broker) -> None:
    """What a backend stores is what JSON holds: a tuple comes back as a list, NaN as None."""
    broker.docs.put("c", "j", {"t": (1, 2), "n": float("nan")}, 100.0)
    broker.docs.update_if("c", "j", "t", [1, 2], {"u": ("a",)}, 100.0)
    assert broker.docs.get("c", "j", 100.0) == {"t": [1, 2], "n": None, "u": ["a"]}


def test_bounded_logs_newest_first(broker: Broker) -> None:
    broker.log_append("h", [{"i": i} for i in range(5)], cap=3)
    broker.log_append("h", [{"i": 5}], cap=3)
    assert broker.log_read("h", 10) == [{"i": 5}, {"i": 4}, {"i": 3}]
    assert broker.log_read("h", 1) == [{"i": 5}]
    assert broker.log_read("empty", 10) == []


def test_counters_accumulate_and_expire(broker: Broker) -> None:
    broker.counters_add("m:1", {"done": 1, "ms": 2.5}, 0.0, ttl=60)
    broker.counters_add("m:1", {"done": 2}, 1.0, ttl=60)
    assert broker.counters_get(["m:1", "m:2"], 2.0) == {"m:1": {"done": 3, "ms": 2.5}}
    assert broker.counters_get(["m:1"], 100.0) == {}


def test_events_add_for_non_job_events(broker: Broker) -> None:
    broker.events_add([{"type": "worker_up", "worker": "w1", "at": 1.0}])
    events, _ = broker.events_read(None, 10)
    assert events[-1]["type"] == "worker_up" and events[-1]["worker"] == "w1"


def test_side_stores_are_composed_objects_that_satisfy_the_protocols(broker: Broker) -> None:
    """Each backend composes its side stores (objects, not mixin methods) behind small protocols."""
    from conveyor.broker.side import CounterStore, DocStore, EventStore, LogStore, SideStores

    stores: SideStores = broker  # mypy: a Broker is a SideStores
    parts = [
        (stores.docs, DocStore),
        (stores.logs, LogStore),
        (stores.events, EventStore),
        (stores.counters, CounterStore),
    ]
    for part, protocol in parts:
        assert isinstance(part, protocol) and part is not broker
    assert isinstance(broker, SideStores)
    stores.docs.put("c", "a", {"x": 1}, 0.0)
    assert stores.docs.update_if("c", "a", "x", 1, {"x": 2}, 0.0)
    assert stores.docs.list("c", 0.0) == {"a": {"x": 2}} == {"a": broker.doc_get("c", "a", 0.0)}
    assert stores.docs.get("c", "a", 0.0) == {"x": 2} and stores.docs.delete("c", "a")
    stores.logs.append("h", [{"i": 1}], 5)
    assert stores.logs.read("h", 5) == [{"i": 1}] == broker.log_read("h", 5)
    stores.events.add([{"type": "worker_up", "worker": "w", "at": 1.0}])
    events, _ = stores.events.read(None, 10)
    assert [e["type"] for e in events] == ["worker_up"]
    stores.counters.add("m", {"n": 1}, 0.0, 60)
    assert stores.counters.get(["m"], 1.0) == {"m": {"n": 1}} == broker.counters_get(["m"], 1.0)


def flat_side_calls(package_root: Path) -> list[str]:
    """``file:line`` of each flat side-store call (``x.doc_put(`` ...) in the process packages."""
    pattern = re.compile(
        r"\.(doc_(put|get|list|delete|update_if)|log_(append|read)"
        r"|events_(add|read)|counters_(add|get))\("
    )
    hits = []
    for sub in ("monitoring", "scheduler", "worker"):
        for path in sorted((package_root / sub).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(package_root)}:{n}")
    return hits


def test_processes_call_the_side_store_objects() -> None:
    """Monitoring, the scheduler and the worker registry go through ``broker.docs`` & co."""
    import conveyor

    assert flat_side_calls(Path(conveyor.__file__).parent) == []
