"""Hostile rows written straight into real storage never stop a claim (issue 13, hostile 1-2).

A stored envelope that Conveyor could not have written (args nesting 600 deep, an integer beyond
64 bits) sits among 30 good jobs: every good job runs exactly once, the bad ones end in
``dead_letter`` with kind ``decode_error``, and ``get()`` still answers for them.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from conveyor import Conveyor, JobState
from conveyor.broker.base import Broker
from conveyor.config import Settings
from tests.support.backends import BACKENDS
from tests.support.hostile import UNENCODABLE, deep_json_text

from .conftest import FAST, running, wait_until

STORED = [name for name in ("sqlite", "redis", "postgres") if name in BACKENDS]
BAD_ROWS = {
    "deep_args": lambda envelope: envelope.replace(
        b'"args":[0]', b'"args":[' + deep_json_text(600).encode() + b"]"
    ),
    "deep_args_typed": lambda envelope: envelope.replace(  # a typed value: decoded in claim
        b'"args":[0]', b'"args":[' + deep_json_text(600).encode() + b',{"$dt":"2024-01-02"}]'
    ),
    "int_over_64_bits": lambda envelope: envelope.replace(
        b'"max_attempts":4', b'"max_attempts":' + str(UNENCODABLE["int_over_64_bits"]).encode()
    ),
}


@pytest.fixture(params=STORED)
def stored(request: Any, tmp_path: Path) -> Iterator[Broker]:
    """A fresh SQLite file, flushed Redis database or flushed PostgreSQL schema."""
    broker = BACKENDS[request.param](request, tmp_path, None)
    yield broker
    broker.close()


def _read_envelope(broker: Broker, job_id: str) -> bytes:
    if hasattr(broker, "conninfo"):  # PostgreSQL
        import psycopg

        with psycopg.connect(broker.conninfo) as conn:
            row = conn.execute("SELECT payload FROM conveyor.jobs WHERE id = %s", (job_id,))
            return bytes(row.fetchone()[0])  # type: ignore[index]
    if hasattr(broker, "path"):
        with sqlite3.connect(broker.path) as conn:
            return bytes(
                conn.execute("SELECT payload FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
            )
    return bytes(broker.client.hget("conveyor:{default}:payloads", job_id))  # type: ignore[attr-defined]


def _write_envelope(broker: Broker, job_id: str, raw: bytes) -> None:
    """Overwrite a stored envelope behind Conveyor's back (SQL UPDATE / redis HSET)."""
    if hasattr(broker, "conninfo"):  # PostgreSQL
        import psycopg

        with psycopg.connect(broker.conninfo) as conn:
            conn.execute("UPDATE conveyor.jobs SET payload = %s WHERE id = %s", (raw, job_id))
        return
    if hasattr(broker, "path"):
        with sqlite3.connect(broker.path) as conn:
            conn.execute("UPDATE jobs SET payload = ? WHERE id = ?", (raw, job_id))
        return
    broker.client.hset("conveyor:{default}:payloads", job_id, raw)  # type: ignore[attr-defined]


def test_bad_stored_rows_are_dead_lettered_and_good_jobs_run_once(stored: Broker) -> None:
    app = Conveyor(stored, settings=Settings(**FAST), rng=random.Random(3))  # type: ignore[arg-type]
    ran: list[int] = []
    lock = threading.Lock()

    @app.task
    def work(n: int) -> None:
        with lock:
            ran.append(n)

    good, bad = [], {}
    for i in range(30):
        good.append(work.enqueue(i + 1))
        if i in (4, 11, 17):  # bad rows in the middle of what one claim batch leases
            name = list(BAD_ROWS)[len(bad)]
            handle = work.enqueue(0)
            raw = _read_envelope(stored, handle.id)
            assert b'"args":[0]' in raw and b'"max_attempts":4' in raw
            _write_envelope(stored, handle.id, BAD_ROWS[name](raw))
            bad[name] = handle.id
    with running(app, concurrency=4):
        wait_until(lambda: all(app.get_job(h.id).state is JobState.COMPLETED for h in good), 20)
        for job_id in bad.values():
            wait_until(lambda job_id=job_id: app.get_job(job_id).state is JobState.DEAD_LETTER, 10)
    assert sorted(ran) == list(range(1, 31))  # every good job exactly once, no bad one ran
    for name, job_id in bad.items():
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.DEAD_LETTER, name
        assert job.errors[-1]["kind"] == "decode_error", (name, job.errors)
        assert job.lost == 0, name
        assert app.broker.search(app_query(job_id)).total == 1
    for handle in good:
        job = app.get_job(handle.id)
        assert job.attempts == 1 and job.lost == 0 and not job.errors


def app_query(job_id: str) -> Any:
    """A search by id (the dashboard's job pages read this way)."""
    from conveyor.broker.base import SearchQuery

    return SearchQuery(id=job_id)


def test_orjson_really_refuses_these_values() -> None:
    """The rows are bad because Conveyor itself could never have written them."""
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(UNENCODABLE["deep_nesting"])
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(UNENCODABLE["int_over_64_bits"])


def test_an_undecodable_workflow_node_ends_its_dependants(stored: Broker) -> None:
    # SQLite dead-lettered the undecodable row at claim without releasing its dependants
    # (PostgreSQL and Redis did): the rest of the workflow waited for ever
    from conveyor import chain

    app = Conveyor(stored, settings=Settings(**FAST), rng=random.Random(3))  # type: ignore[arg-type]

    @app.task
    def first(n: int) -> int:
        return n

    @app.task
    def then(n: int) -> int:
        return n

    flow = chain(first.partial(0), then.partial(), then.partial()).enqueue()
    raw = _read_envelope(stored, flow.ids[0])
    _write_envelope(stored, flow.ids[0], BAD_ROWS["deep_args"](raw))
    assert app.broker.claim(["default"], app.now(), limit=10, worker_id="w") == []
    states = [app.get_job(i).state for i in flow.ids]
    assert states == [JobState.DEAD_LETTER, JobState.CANCELLED, JobState.CANCELLED], states
    assert flow.done()
